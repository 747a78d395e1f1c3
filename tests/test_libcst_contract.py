"""What flowtrace relies on in libcst's internals, checked against libcst's public API.

The index takes two shortcuts through libcst internals for speed (issue 16 measured them at
about a third of a cold scan): positions from one logging code generation
(``syntax.Positions``: a ``CodegenState`` subclass and a patched ``_parenthesize``) and
parsing without per-node validation (``parse._unvalidated_nodes``: a patched
``CSTNode.__post_init__``). Both are pinned to a tested libcst range (pyproject.toml); CI runs
this file on the lowest version of that range as well as the newest. If a libcst release
changes those internals, these comparisons fail instead of facts quietly moving.
"""

from __future__ import annotations

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from fixture_paths import FIXTURES
from flowtrace.index.parse import _unvalidated_nodes
from flowtrace.index.syntax import UNPOSITIONED, Positions, iter_nodes

SAMPLES = sorted(FIXTURES.rglob("*.py"))
EXTRA = {
    "parens": b"x = ((a) + (b))[(c)]\nf((y), *(z), **(w))\n",
    "decorated": b"@d(1)\n@e\nclass A(B):\n    @p\n    def f(self, a=(1, 2), *, b=[3]) -> (int):\n        return (yield (a))\n",
    "strings": b'x = f"{a!r:>{w}}" "tail" \\\n    "more"\ny = """\nmulti\n"""\n',
    "comments": b"# head\n\nclass A:  # trailing\n    # inner\n    x = 1\n\n    # footer\n",
}


def _cases():
    for path in SAMPLES:
        yield path.relative_to(FIXTURES).as_posix(), path.read_bytes()
    yield from EXTRA.items()


CASES = list(_cases())


@pytest.mark.parametrize("name,data", CASES, ids=[c[0] for c in CASES])
def test_positions_equal_libcsts_position_provider(name, data):
    module = cst.parse_module(data)
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    public = wrapper.resolve(PositionProvider)
    ours = Positions(module)
    checked = 0
    for node in iter_nodes(module):
        # the Module itself is the one known difference: Positions skips libcst's
        # pop_trailing_newline, so a module ends a line later; no fact reads its range
        # whitespace and comment nodes are generated unlogged (syntax.UNPOSITIONED): no fact
        # reads where they are
        if node not in public or isinstance(node, (cst.Module, *UNPOSITIONED)):
            continue
        want, got = public[node], ours[node]
        assert (got.start.line, got.start.column, got.end.line, got.end.column) == (
            want.start.line, want.start.column, want.end.line, want.end.column,
        ), (name, type(node).__name__)
        checked += 1
    assert checked > 0 or not data.strip(), "a non-empty file must have compared nodes"


@pytest.mark.parametrize("name,data", CASES, ids=[c[0] for c in CASES])
def test_unvalidated_parsing_builds_the_same_tree(name, data):
    validated = cst.parse_module(data)
    with _unvalidated_nodes():
        fast = cst.parse_module(data)
    assert fast.deep_equals(validated), name
    assert fast.code == validated.code == data.decode("utf-8")


def test_validation_is_back_after_the_block():
    with _unvalidated_nodes():
        pass
    with pytest.raises(cst.CSTValidationError):
        cst.Name("not a name")


def test_whitespace_is_logged_again_after_positions():
    """Positions generates whitespace unlogged only while it runs: libcst's own provider,
    run afterwards, still positions every whitespace node."""
    module = cst.parse_module(b"x = (1 ,  2)  # c\n\ny = 3\n")
    Positions(module)
    assert all("_codegen" not in kind.__dict__ for kind in UNPOSITIONED)
    public = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    kinds = {type(node) for node in public}
    assert {cst.SimpleWhitespace, cst.TrailingWhitespace, cst.Newline, cst.Comment, cst.EmptyLine} <= kinds

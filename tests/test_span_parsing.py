"""libcst sees only the spans that can matter, and the facts are the same as from whole files.

The span selection (flowtrace/index/spans.py) stubs dull function bodies out on their own
lines; these tests compare, file by file, the facts of a span parse with those of a whole-file
parse (``analyze_bytes(..., spans=False)``, what the index did before spans), on every fixture
file, on hand-written edge cases, and on a real engine tree when one is given.
"""

from __future__ import annotations

import ast
import bisect
import os
import re
from pathlib import Path

import pytest

from fixture_paths import FIXTURES
from flowtrace.index import spans
from flowtrace.index.parse import _screen, analyze_bytes
from flowtrace.engines.profiles import Conventions, load_all

CONV = Conventions.merge(load_all())


def _cut(data: bytes) -> bytes | None:
    problem, tree, imports = _screen(data)
    assert problem is None
    return spans.select(data, tree, imports, CONV)


def _same_facts(rel: str, data: bytes) -> None:
    whole = analyze_bytes(rel, data, CONV, spans=False)
    cut = analyze_bytes(rel, data, CONV, spans=True)
    assert cut == whole, rel


FIXTURE_FILES = sorted(p for p in FIXTURES.rglob("*.py"))


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=[p.relative_to(FIXTURES).as_posix() for p in FIXTURE_FILES])
def test_span_facts_equal_whole_file_facts_on_every_fixture_file(path):
    _same_facts(path.relative_to(FIXTURES).as_posix(), path.read_bytes())


def test_the_fixtures_really_exercise_stubs():
    stubbed = [p for p in FIXTURE_FILES if _cut(p.read_bytes()) is not None]
    # the fixture engines are small: few bodies are dull enough; DULL_CLASS and the real tree cover more
    assert stubbed, "the comparison above must cover a file whose bodies were cut"


DULL_CLASS = b'''import torch
from .base import Base


class Model(Base):
    """A model."""

    def __init__(self, config):
        self.layers = [Layer() for _ in range(3)]
        self.layers_to_capture = []

    def helper(self, x):
        import math
        from os import path as p, \\
            sep
        y = math.sqrt(x)
        try:
            import json
        except ImportError:
            json = None
        return y + 1

    def loads(self, weights):
        # a long dull body
        total = 0
        for name, w in weights:
            total += w
        return total

    def forward(self, x, residual=None):
        aux_hidden_states = []
        for i, layer in enumerate(self.layers):
            if i in self.layers_to_capture:
                aux_hidden_states.append(x)
            x = layer(x)
        return torch.cat(aux_hidden_states, dim=-1)


def module_helper(a,
                  b):
    c = a + b
    d = c * 2
    return d
'''


def test_a_dull_body_becomes_a_stub_on_the_same_lines_with_its_imports():
    cut = _cut(DULL_CLASS)
    assert cut is not None
    before, after = DULL_CLASS.splitlines(), cut.splitlines()
    assert len(before) == len(after), "every line stays where it was"
    ast.parse(cut)
    by_line = dict(enumerate(after, 1))
    # helper's body: imports kept (re-indented to the body), the rest a string literal
    assert by_line[13] == b"        import math"
    assert by_line[14] == b"        from os import path as p, \\" and by_line[15] == b"            sep"
    assert by_line[18] == b"        import json"
    assert b"sqrt" not in cut and b"total" not in cut and b"d = c * 2" not in cut
    # what matters is untouched: __init__, the capture loop, def lines, the class header
    for n in (5, 8, 9, 10, 12, 23, 24, 30, 31, 32, 33, 34, 35, 36, 39, 40):
        assert by_line[n] == before[n - 1], n
    _same_facts("pkg/models/dull.py", DULL_CLASS)


def test_a_method_init_calls_is_kept_with_its_return():
    source = b'''class Holder:
    def __init__(self, config):
        self.model = self._make(config)

    def _make(self, config):
        a = 1
        b = 2
        return FooModel(config)
'''
    assert _cut(source) is None, "_make decides what __init__ builds: nothing to stub"
    _same_facts("pkg/holder.py", source)


EDGE_CASES = {
    "crlf": DULL_CLASS.replace(b"\n", b"\r\n"),
    "lone_cr": DULL_CLASS.replace(b"\n", b"\r"),
    "no_final_newline": DULL_CLASS.rstrip(b"\n"),
    "tabs": DULL_CLASS.replace(b"    ", b"\t"),
    "latin1": b"# -*- coding: latin-1 -*-\n" + DULL_CLASS.replace(b"a long dull body", b"caf\xe9 dull body"),
    "one_line_bodies": b"class A:\n    def f(self): return 1\n    def g(self): x = 1; y = 2; return x + y\n",
    "decorated": b"class A:\n    @property\n    @other(\n        1)\n    def f(self):\n        a = 1\n        b = 2\n        return a\n",
    "nested_class": b"class A:\n    class B:\n        def f(self):\n            a = 1\n            b = 2\n            return a\n    def __init__(self):\n        self.b = A.B()\n",
    "if_blocks": b"if True:\n    def f():\n        a = 1\n        b = 2\n        return a\nelse:\n    class C:\n        def g(self):\n            a = 1\n            b = 2\n            return b\n",
    "imports_on_one_line": b"def f():\n    import a; import b\n    x = 1\n    return x\n",
    "docstring_only": b'class A:\n    def f(self):\n        """One.\n\n        Two.\n        """\n',
    "trailing_comment_mentions_a_word": b"class A:\n    def f(self):\n        a = 1\n        b = 2\n        return a\n        # layers_to_capture\n\n    def g(self):\n        pass\n",
}


@pytest.mark.parametrize("name", sorted(EDGE_CASES))
def test_edge_cases_keep_the_facts_and_parse(name):
    data = EDGE_CASES[name]
    cut = _cut(data)
    if cut is not None:
        assert len(cut.splitlines()) == len(data.splitlines())
        ast.parse(cut)
    _same_facts(f"pkg/models/{name}.py", data)


def test_the_full_parse_switch_turns_spans_off(monkeypatch):
    from flowtrace.index import parse

    seen = []
    real = parse.select_spans
    monkeypatch.setattr(parse, "select_spans", lambda *a: seen.append(1) or real(*a))
    monkeypatch.setenv(parse.FULL_PARSE_ENV, "1")
    analyze_bytes("pkg/models/dull.py", DULL_CLASS, CONV)
    assert not seen
    monkeypatch.delenv(parse.FULL_PARSE_ENV)
    analyze_bytes("pkg/models/dull.py", DULL_CLASS, CONV)
    assert seen


REAL = os.environ.get("FLOWTRACE_SPAN_TREE")


@pytest.mark.skipif(not REAL, reason="set FLOWTRACE_SPAN_TREE to an engine tree (e.g. /work/engines/sglang-0.5.23)")
def test_span_facts_equal_whole_file_facts_on_a_real_tree():
    root = Path(REAL)
    checked = 0
    for path in sorted(root.rglob("*.py")):
        data = path.read_bytes()
        if any(m in data for m in CONV.markers):
            _same_facts(path.relative_to(root).as_posix(), data)
            checked += 1
    assert checked > 10


def _alternation_lines(data: bytes, gate) -> list[int]:  # noqa: ANN001
    """What the gate's lines were when it was one alternation (a leading ``\\b`` for whole words)."""
    alternatives = [(rb"\b" + s.pattern.pattern) if s.word_start else s.pattern.pattern for s in gate]
    pattern = re.compile(b"|".join(alternatives) if alternatives else rb"(?!)")
    starts = [0]
    for line in data.splitlines(keepends=True)[:-1]:
        starts.append(starts[-1] + len(line))
    return sorted({bisect.bisect_right(starts, m.start()) for m in pattern.finditer(data)})


TRICKY = (
    b"raise\nxraise raise_ _raise\n(raise)\nsuperraise\nsuper().f()\nAUX aUx\naux_hidden_states\n"
    b"eagle_aux_hidden_state_layer_ids_aux\nlayers_to_capturelayers_to_capture\r\nlayers for\r"
    b"  raise ValueError\nsuper\n\xc3\xa9raise \xff super\n"
)


def test_word_gates_find_the_lines_one_alternation_finds():
    """spans searches each word on its own (fast literal search); the lines it finds must be
    those one alternation of all the words finds, on tricky text and on every fixture file."""
    for data in [TRICKY, *(p.read_bytes() for p in FIXTURE_FILES)]:
        lines = spans._Lines(data, spans.body_patterns(CONV))
        gates = spans.body_patterns(CONV)
        assert lines.hits == _alternation_lines(data, gates[0])
        assert lines.layer_hits == _alternation_lines(data, gates[1])
    assert spans._Lines(TRICKY, spans.body_patterns(CONV)).hits[:6] == [1, 3, 5, 6, 7, 8]  # not: xraise raise_ _raise, superraise

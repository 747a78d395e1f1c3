"""The two extraction tiers give one class table.

A file that names a capture marker gets the full analysers (``index/visitors.py``); a file
that only registers or subclasses a model gets the cheap tier (``index/class_table.py``).
Cross-file resolution reads classes (every field), imports, registrations, re-exports and
the return-path facts from either, and both read them with the same code
(``class_table.module_tables``), so a file's table does not change when someone adds a
marker to it. This runs both tiers on every fixture file, on the shapes that drifted before
(an annotated ``EntryClass`` dropped a marker file's facts as a fake "cannot decode" parse
error), and on shapes real engines use where the two tiers once read differently.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fixture_paths import FIXTURES
from flowtrace.engines.profiles import Conventions, load_all
from flowtrace.index.class_table import table_facts
from flowtrace.index.parse import analyze_bytes
from flowtrace.model import facts as F

CONV = Conventions.merge(load_all())
FIXTURE_FILES = sorted(p for p in FIXTURES.rglob("*.py") if "__pycache__" not in p.parts)


def shared(ff: F.FileFacts) -> dict[str, object]:
    """The facts both tiers produce, in comparable form."""
    return {
        "diagnostics": sorted((d.kind, d.line) for d in ff.diagnostics),
        "imports": sorted((i.local, i.qualified) for i in ff.imports),
        "classes": list(ff.classes),
        "registry": list(ff.registry),
        "reexports": list(ff.reexports),
        "returns": [ff.output_uses, ff.return_shapes, ff.flag_defaults],
    }


def both(path: str, data: bytes) -> tuple[dict[str, object], dict[str, object]]:
    return shared(analyze_bytes(path, data, CONV)), shared(table_facts(path, data, CONV))


def test_there_are_fixture_files():
    assert len(FIXTURE_FILES) > 20


@pytest.mark.parametrize("file", FIXTURE_FILES, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_both_tiers_read_the_same_table_from_every_fixture_file(file: Path):
    engine_root = FIXTURES / file.relative_to(FIXTURES).parts[0]
    path = file.relative_to(engine_root).as_posix()
    full, table = both(path, file.read_bytes())
    assert full == table


MARKER = "aux_hidden_states"  # a capture marker of the sglang profile: the file goes to libcst

SHAPES = {
    "annotated_entry_class": "class A:\n    pass\n\n\nclass B(A):\n    pass\n\n\nEntryClass: list = [A, B]\n",
    "tuple_entry_class": "from pkg.base import Base\n\n\nclass A(Base):\n    pass\n\n\nEntryClass = (A,)\n",
    "single_entry_class": (
        "import pkg.models.base as base\n\n\n"
        "class A(base.Base):\n"
        "    def forward(self):\n"
        "        pass\n\n\n"
        "EntryClass = A\n"
    ),
    "generic_and_relative_bases": (
        "from ..layers import base as b\n"
        "from .sibling import Mixin\n\n\n"
        "class A(b.Base[int], Mixin):\n"
        "    async def forward(self):\n"
        "        pass\n"
    ),
    "annotation_without_value": "class A:\n    pass\n\n\nEntryClass: list\n",
    "star_import_and_alias": (
        "from pkg.models import *\n"
        "import pkg.models.llama as llama_mod\n"
        "import os.path\n\n\n"
        "class A(llama_mod.LlamaForCausalLM):\n"
        "    pass\n\n\n"
        "EntryClass = [A]\n"
    ),
}


@pytest.mark.parametrize("name", sorted(SHAPES))
@pytest.mark.parametrize("with_marker", [False, True], ids=["no-marker", "marker"])
def test_both_tiers_agree_on_registration_shapes(name: str, with_marker: bool):
    source = SHAPES[name] + (f"\n\ndef helper(x):\n    {MARKER} = [x]\n    return {MARKER}\n" if with_marker else "")
    full, table = both(f"pkg/models/{name}.py", source.encode())
    assert full == table
    assert full["diagnostics"] == []


def test_an_annotated_entry_class_registers_both_classes():
    """Read from the source: ``EntryClass: list = [A, B]`` registers A and B at line 9."""
    source = SHAPES["annotated_entry_class"] + f"\n\ndef helper(x):\n    {MARKER} = [x]\n"
    for facts in (
        analyze_bytes("pkg/models/m.py", source.encode(), CONV),
        table_facts("pkg/models/m.py", source.encode(), CONV),
    ):
        assert not facts.diagnostics
        assert sorted((r.architecture, r.target, r.location.line) for r in facts.registry) == [
            ("A", "pkg.models.m.A", 9),
            ("B", "pkg.models.m.B", 9),
        ]


# Shapes from real engines on which the two tiers once read different tables (written from
# the source below, not from either tier's output).
DRIFTED = '''\
from typing import TYPE_CHECKING

from pkg.interfaces import SupportsPP

if TYPE_CHECKING:

    class _PPBase:
        pass

else:
    _PPBase = SupportsPP


class Model:
    pass


class Wrapper(_PPBase):
    def __init__(self, config):
        super(Wrapper, self).__init__()
        self.llm = self.init_llm(config)

    def init_llm(self, config):
        return Model(config)

    def forward(self):
        from pkg.outputs import Output

        return Output()

    class Inner:
        pass
'''


@pytest.mark.parametrize("with_marker", [False, True], ids=["no-marker", "marker"])
def test_shapes_the_tiers_once_read_differently(with_marker: bool):
    source = DRIFTED + (f"\n\ndef helper(x):\n    {MARKER} = [x]\n    return {MARKER}\n" if with_marker else "")
    facts = (analyze_bytes if with_marker else table_facts)("pkg/models/m.py", source.encode(), CONV)
    classes = {c.name: c for c in facts.classes}
    # the class under `if TYPE_CHECKING:` and the one nested in Wrapper are classes of the module
    assert [c.qualname for c in facts.classes] == [
        "pkg.models.m._PPBase",
        "pkg.models.m.Model",
        "pkg.models.m.Wrapper",
        "pkg.models.m.Wrapper.Inner",
    ]
    assert classes["Wrapper"].bases == ("pkg.models.m._PPBase",)
    # self.llm is what init_llm returns (line 21), through a method a subclass may override
    assert F.AttributeAssignment("llm", "pkg.models.m.Model", 21, "method:init_llm") in classes["Wrapper"].assignments
    # methods returning a newly built class: init_llm (line 24) and forward (line 29)
    assert classes["Wrapper"].factories == (
        F.AttributeAssignment("init_llm", "pkg.models.m.Model", 24),
        F.AttributeAssignment("forward", "pkg.outputs.Output", 29),
    )
    # `super(Wrapper, self).__init__()` is not the `super().__init__(` call extends looks for
    assert classes["Wrapper"].extends == ()
    # an import inside a method binds the name too (the last binding of a name wins)
    assert ("Output", "pkg.outputs.Output") in [(i.local, i.qualified) for i in facts.imports]
    assert both("pkg/models/m.py", source.encode())[0] == both("pkg/models/m.py", source.encode())[1]


# Imports inside functions count; the cheap tier walks only the functions whose lines hold
# "import" (counted as the parser counts lines: \n, \r\n and \r each end one).
NESTED_IMPORTS = [
    "import os",
    "",
    "def first():",
    "    importance = 1",
    "    return importance",
    "",
    "def second():",
    "    def inner():",
    "        from pkg.a import B as C",
    "        return C",
    "    return inner",
    "",
    "class K:",
    "    def m(self):",
    "        x = 1",
    "        import pkg.b",
    "        return x",
    "",
]


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"], ids=["lf", "crlf", "cr"])
def test_imports_inside_functions_are_read_whatever_ends_the_lines(newline: str):
    data = newline.join(NESTED_IMPORTS).encode()
    facts = table_facts("pkg/models/m.py", data, CONV)
    assert sorted((i.local, i.qualified) for i in facts.imports) == [("C", "pkg.a.B"), ("os", "os"), ("pkg", "pkg")]
    full, cheap = both("pkg/models/m.py", data)
    assert cheap["imports"] == full["imports"]


# The cheap tier's layer loops: a `for` whose iterable or body touches self.<layers attribute>,
# found through each method's text (a method or loop whose text names no layers attribute, or
# says no `for`, is not walked; "layers" in a comment alone finds nothing).
LOOPS = """\
class M:
    # décodeur: the layers run below
    def forward(self, x):
        for i in range(3):
            x = x + i
        for layer in self.layers:
            x = layer(x)
        return x

    def names(self):
        # every layers entry
        for name in ("a", "b"):
            print(name)

    def count(self):
        n = 0
        for _ in range(2):
            n += len(self.layers)
        return n
"""


def test_the_cheap_tier_finds_the_loops_that_touch_the_layers():
    facts = table_facts("pkg/models/m.py", LOOPS.encode(), CONV)
    assert "layers" in CONV.layers_attributes
    assert [(f.class_qualname, f.function, f.location.line, f.captures) for f in facts.layer_loops] == [
        ("pkg.models.m.M", "M.count", 17, False),
        ("pkg.models.m.M", "M.forward", 6, False),
    ]

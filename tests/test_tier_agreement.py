"""The two extraction tiers agree on the facts both produce.

A file that names a capture marker is analysed with libcst (``index/visitors.py``); a file
that only registers or subclasses a model gets the stdlib class table
(``index/class_table.py``). Cross-file resolution reads classes, bases, methods,
registrations and imports from either, so the two must give the same answer for the same
source, or a file's facts change when someone adds a marker to it. This runs both tiers on
every fixture file and on the shapes that drifted before (an annotated ``EntryClass``
dropped a marker file's facts as a fake "cannot decode" parse error).
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
        "classes": sorted((c.name, c.qualname, c.location.line, c.bases, tuple(sorted(c.methods))) for c in ff.classes),
        "registry": sorted((r.architecture, r.target, r.location.line, r.kind, r.group) for r in ff.registry),
        "returns": sorted(map(repr, (*ff.output_uses, *ff.return_shapes, *ff.flag_defaults))),
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


@pytest.mark.parametrize("file", FIXTURE_FILES, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_the_table_finds_no_init_assignment_the_full_tier_misses(file: Path):
    """The class table is the cheaper approximation for ``__init__`` assignments (it does not
    follow ``self._make()`` factories), so its assignments are a subset, never different ones."""
    engine_root = FIXTURES / file.relative_to(FIXTURES).parts[0]
    path = file.relative_to(engine_root).as_posix()
    data = file.read_bytes()
    full = {(c.qualname, a.attribute, a.callee, a.line) for c in analyze_bytes(path, data, CONV).classes for a in c.assignments}
    table = {(c.qualname, a.attribute, a.callee, a.line) for c in table_facts(path, data, CONV).classes for a in c.assignments}
    assert table <= full, table - full


MARKER = "aux_hidden_states"  # a capture marker of the sglang profile: the file goes to libcst

SHAPES = {
    "annotated_entry_class": "class A:\n    pass\n\n\nclass B(A):\n    pass\n\n\nEntryClass: list = [A, B]\n",
    "tuple_entry_class": "from pkg.base import Base\n\n\nclass A(Base):\n    pass\n\n\nEntryClass = (A,)\n",
    "single_entry_class": "import pkg.models.base as base\n\n\nclass A(base.Base):\n    def forward(self):\n        pass\n\n\nEntryClass = A\n",
    "generic_and_relative_bases": "from ..layers import base as b\nfrom .sibling import Mixin\n\n\nclass A(b.Base[int], Mixin):\n    async def forward(self):\n        pass\n",
    "annotation_without_value": "class A:\n    pass\n\n\nEntryClass: list\n",
    "star_import_and_alias": "from pkg.models import *\nimport pkg.models.llama as llama_mod\nimport os.path\n\n\nclass A(llama_mod.LlamaForCausalLM):\n    pass\n\n\nEntryClass = [A]\n",
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
    for facts in (analyze_bytes("pkg/models/m.py", source.encode(), CONV), table_facts("pkg/models/m.py", source.encode(), CONV)):
        assert not facts.diagnostics
        assert sorted((r.architecture, r.target, r.location.line) for r in facts.registry) == [("A", "pkg.models.m.A", 9), ("B", "pkg.models.m.B", 9)]

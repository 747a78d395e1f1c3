"""The project's parts are composed one way: lookup <- holders <- capture assembly <- project,
and registries <- lookup. A part is handed the parts below it and never imports one above,
so a reader of a rule can tell from ``project.<part>`` which facts it rests on."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import flowtrace
from flowtrace.analysis.capture_assembly import CaptureAssembly
from flowtrace.analysis.holders import Holders
from flowtrace.analysis.registries import Registries

ANALYSIS = Path(flowtrace.__file__).parent / "analysis"

# Each part, and the parts (with the project) it must not reach, directly or through any
# module of flowtrace.analysis it imports (TYPE_CHECKING imports included: a type names a dependency too).
ABOVE = {
    "class_lookup": {"holders", "capture_assembly", "registries", "resolve"},
    "holders": {"capture_assembly", "registries", "resolve"},
    "registries": {"holders", "capture_assembly", "resolve"},
    "capture_assembly": {"registries", "resolve"},
}


def _analysis_imports(module: str) -> set[str]:
    """The flowtrace.analysis modules ``module`` imports, by their short name."""
    tree = ast.parse((ANALYSIS / f"{module}.py").read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("flowtrace.analysis."):
            out.add(node.module.rsplit(".", 1)[-1])  # type: ignore[union-attr]
        elif isinstance(node, ast.Import):
            out.update(a.name.rsplit(".", 1)[-1] for a in node.names if a.name.startswith("flowtrace.analysis."))
    return out


def _reached(module: str) -> set[str]:
    seen: set[str] = set()
    todo = [module]
    while todo:
        for name in _analysis_imports(todo.pop()) - seen:
            seen.add(name)
            todo.append(name)
    return seen


@pytest.mark.parametrize("part", sorted(ABOVE))
def test_a_part_never_reaches_a_part_above_it(part):
    assert not _reached(part) & ABOVE[part]


def test_the_reach_check_sees_an_import_above():
    # resolve imports every part: the walk must find them (else the test above proves nothing).
    assert {"class_lookup", "holders", "capture_assembly", "registries"} <= _reached("resolve")


@pytest.mark.parametrize(
    "part, given",
    [(Holders, ["lookup"]), (CaptureAssembly, ["lookup", "holders"]), (Registries, ["lookup"])],
)
def test_a_part_is_handed_only_the_parts_below_it(part, given):
    assert list(inspect.signature(part.__init__).parameters)[1:] == given


def test_the_project_shares_one_lookup_among_its_parts(vllm_scan):
    project = vllm_scan.project
    assert project.holders.lookup is project.lookup
    assert project.captures.lookup is project.lookup and project.captures.holders is project.holders
    assert project.registries.lookup is project.lookup

"""The package layout reads as the pipeline: no import cycle, and imports point down the stages.

errors -> model -> engines -> sources -> index -> analysis -> checks -> lint -> fix -> render -> api -> cli,
with probe beside (it may use the pipeline; only the command line registers it). Module- and
function-level imports both count (a lazy import is still a dependency); ``TYPE_CHECKING``
blocks do not, and a package's ``__init__`` may re-export its own modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parents[1] / "flowtrace"
STAGES = ("errors", "model", "engines", "sources", "index", "analysis", "checks", "lint", "fix", "render", "api", "cli")
BESIDE = {"probe": "cli"}  # stage -> the only stage that may import it


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _imported(name: str, path: Path) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for n in node.orelse:
                visit(n)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(parts + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{a.name}" for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def import_graph() -> nx.DiGraph:
    modules = _modules()
    g = nx.DiGraph()
    g.add_nodes_from(modules)
    for name, path in modules.items():
        for target in _imported(name, path):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name and not target.startswith(name + "."):
                g.add_edge(name, target)
    return g


def _stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_there_is_no_import_cycle():
    cycles = [sorted(c) for c in nx.strongly_connected_components(import_graph()) if len(c) > 1]
    assert cycles == []


def test_imports_point_down_the_pipeline():
    wrong = []
    for a, b in import_graph().edges:
        sa, sb = _stage(a), _stage(b)
        if sa == sb or "" in (sa, sb):
            continue
        if sb in BESIDE:
            if sa not in (sb, BESIDE[sb]):
                wrong.append(f"{a} -> {b}")
        elif sa in STAGES and sb in STAGES and STAGES.index(sb) > STAGES.index(sa):
            wrong.append(f"{a} -> {b}")
    assert wrong == []


def test_every_module_belongs_to_a_stage():
    stray = sorted(
        m for m in _modules() if m != "flowtrace" and _stage(m) not in (*STAGES, *BESIDE, "__main__", "bundled_rules")
    )
    assert stray == []

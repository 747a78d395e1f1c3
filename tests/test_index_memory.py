"""A file's syntax tree is freed as soon as its facts are built (refcounting), never left to
the cyclic garbage collector: a reference cycle around the tree (a class made per file, a
visitor class made per call, a recursive closure) kept every tree of a worker alive until a
collection traversed it, which cost a tenth of a cold scan and held the memory meanwhile."""

from __future__ import annotations

import ast
import gc

from fixture_paths import FIXTURES
from flowtrace.engines.profiles import Conventions, load_all
from flowtrace.index.parse import analyze_bytes

CONV = Conventions.merge(load_all())


def _garbage_nodes_after(path: str, data: bytes) -> int:
    gc.collect()
    gc.disable()
    try:
        facts = analyze_bytes(path, data, CONV)
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        nodes = sum(1 for obj in gc.garbage if isinstance(obj, ast.AST))
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert not facts.diagnostics, facts.diagnostics
    return nodes


def test_no_tree_is_left_for_the_cyclic_collector():
    files = [p for p in sorted(FIXTURES.rglob("*.py")) if b"class " in p.read_bytes()]
    assert len(files) > 5
    checked = 0
    for path in files:
        data = path.read_bytes()
        if not any(m in data for m in CONV.markers):
            continue  # the full analysers only see files that name a marker
        assert _garbage_nodes_after(path.relative_to(FIXTURES).as_posix(), data) == 0, path
        checked += 1
    assert checked > 3

"""Which copy of a module a package selects at import time, and under which condition.

Engines ship per-platform copies of one model (``pkg/vendor_a/model.py``, ``pkg/vendor_b/model.py``)
and pick one in the package's ``__init__.py``::

    if platform.is_a():
        from .vendor_a.model import XForCausalLM
    elif platform.is_b():
        from .vendor_b.model import XForCausalLM
    else:
        from generic.x import XForCausalLM

A defect in the ``vendor_b`` copy only reaches a draft where that branch runs. This module reads
the nearest ancestor ``__init__.py`` that imports a file and returns the conditions of the
branches that import it, as the engine's own source text (no platform is named by flowtrace:
the condition is quoted). The shape is structural (imports nested in ``if``/``elif``/``else``),
so no engine knowledge is needed. ``TYPE_CHECKING`` branches never run and are left out.

The package ``__init__.py`` files are not among the indexed facts (the byte prefilter skips
them: they name no capture marker), so they are read here, at most a few small files per
finding, parsed with the stdlib ``ast`` and never executed.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from flowtrace.model.facts import Location

_MAX_INIT_BYTES = 256 * 1024  # a package __init__ is small; anything larger is not a dispatch
_MAX_LEVELS = 3  # pkg/vendor_b/model.py -> pkg/vendor_b/__init__.py, pkg/__init__.py, parent/__init__.py
_STATIC_ONLY = "TYPE_CHECKING"
_NOT = "\0not "  # marks an excluded test (an else branch) in a conjunction


def inputs_key(root: Path, files: list[str]) -> tuple[tuple[str, int, int], ...]:
    """What this module reads besides the indexed facts, as (path, size, mtime_ns): the package
    ``__init__.py`` files above ``files`` and the tree's dist-info METADATA. A memo of findings
    keys on it, since the index fingerprint hashes facts only."""
    paths: set[str] = set()
    for file in files:
        parts = Path(file).parts[:-1]
        for up in range(1, min(_MAX_LEVELS, len(parts)) + 1):
            paths.add(Path(*parts[: len(parts) - up + 1], "__init__.py").as_posix())
    out = []
    for rel in sorted(paths):
        try:
            st = Path(root, rel).stat()
        except OSError:
            continue
        out.append((rel, st.st_size, st.st_mtime_ns))
    for meta in sorted(Path(root).glob("*.dist-info/METADATA"))[:8]:
        try:
            st = meta.stat()
        except OSError:
            continue
        out.append((meta.relative_to(root).as_posix(), st.st_size, st.st_mtime_ns))
    return tuple(out)


def build_test(root: Path, builds: tuple[str, ...]) -> str | None:
    """The platform test that holds in this tree when it is a one-platform build named by the
    profile (``[checks] platform_builds``: ``"<dist-info Name>: <test>"``), else None."""
    names = _distributions(str(root))
    for build in builds:
        name, _, test = build.partition(":")
        if _normalised(name) in names and test.strip():
            return test.strip()
    return None


def runs_nowhere(chosen: Selection, test: str) -> bool:
    """In a build where ``test`` holds, every branch importing the copy needs another
    ``is_*()`` test of the same object: one current platform, so none of them runs."""
    obj = re.escape(test.split(".", 1)[0])
    other = re.compile(rf"{obj}\.is_\w+\(\)")

    def impossible(conj: tuple[str, ...]) -> bool:
        return any(c != test and other.fullmatch(c) for c in conj if not c.startswith(_NOT))

    return all(impossible(conj) for conj in chosen.alternatives)


@lru_cache(maxsize=64)
def _distributions(root: str) -> frozenset[str]:
    """The ``Name:`` of each ``*.dist-info/METADATA`` at the tree's top (an unpacked wheel)."""
    out = set()
    for meta in sorted(Path(root).glob("*.dist-info/METADATA"))[:8]:
        try:
            with meta.open(encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    if line.startswith("Name:"):
                        out.add(_normalised(line[5:]))
                        break
                    if not line.strip():
                        break
        except OSError:
            continue
    return frozenset(out)


def _normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name.strip().lower())


def never_selected(root: Path, file: str) -> Location | None:
    """The dispatching ``__init__.py`` of a package that picks between its subpackages under
    conditions and never names the subpackage holding ``file`` (a copy left behind: the
    registered name resolves to another copy on every platform); None otherwise."""
    parts = Path(file).with_suffix("").parts
    for up in range(2, min(_MAX_LEVELS, len(parts) - 1) + 1):
        package = parts[:-up]
        init = Path(*package, "__init__.py").as_posix()
        found = _imports(str(root), init)
        if not any(conds for _, conds, _ in found):
            continue  # no conditional import here: not a dispatch
        sub = parts[len(package)]
        absolute = ".".join((*package, sub))
        named = any(m == sub or m.startswith(sub + ".") or m == absolute or m.startswith(absolute + ".") for m, _, _ in found)
        return None if named else Location(init, 1)
    return None


@dataclass(frozen=True, slots=True)
class Selection:
    """A module imported only under conditions: each alternative is a conjunction of source
    texts (an excluded test, from an ``else``, marked), ``where`` the dispatching import."""

    alternatives: tuple[tuple[str, ...], ...]
    where: Location

    def words(self) -> str:
        """``when `a` or when `b```, for a message: a branch by its own test (the earlier tests
        it excludes are left out), an ``else`` by the tests it excludes."""
        return " or ".join(_conjunction(conj) for conj in self.alternatives)


def _conjunction(conj: tuple[str, ...]) -> str:
    positive = [c for c in conj if not c.startswith(_NOT)]
    if positive:
        return "when " + " and ".join(f"`{c}`" for c in positive)
    excluded = [f"`{c[len(_NOT):]}`" for c in conj]
    return "unless " + excluded[0] if len(excluded) == 1 else "unless one of " + ", ".join(excluded)


def selection(root: Path, file: str) -> Selection | None:
    """How the package around ``file`` (a path relative to ``root``) selects it; None when it
    is imported unconditionally, not imported by an ancestor ``__init__.py``, or unreadable."""
    parts = Path(file).with_suffix("").parts
    for up in range(1, min(_MAX_LEVELS, len(parts) - 1) + 1):
        package = parts[:-up]
        init = Path(*package, "__init__.py").as_posix()
        relative = ".".join(parts[len(package):])
        absolute = ".".join(parts)
        found = _imports(str(root), init)
        hits = [(conds, line) for module, conds, line in found if module in (relative, absolute)]
        if not hits:
            continue
        if any(not conds for conds, _ in hits):
            return None  # imported unconditionally somewhere: every platform runs it
        live = tuple(dict.fromkeys(conds for conds, _ in hits))
        return Selection(live, Location(init, min(line for _, line in hits)))
    return None


def _imports(root: str, init: str) -> tuple[tuple[str, tuple[str, ...], int], ...]:
    """(module, conditions, line) of every relative or absolute import in ``init`` reached at
    run time; the module as dotted text relative to the package for relative imports (both
    ``from .a.b import X`` -> "a.b" and ``from .a import b`` -> "a.b")."""
    path = Path(root, init)
    try:
        stat = path.stat()
    except OSError:
        return ()
    if not path.is_file() or stat.st_size > _MAX_INIT_BYTES:
        return ()
    return _parsed(str(path), init, stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=256)
def _parsed(path: str, init: str, mtime_ns: int, size: int) -> tuple[tuple[str, tuple[str, ...], int], ...]:
    """The imports of one file version (the cache key changes when the file does)."""
    try:
        tree = ast.parse(Path(path).read_bytes(), filename=init)
    except (OSError, SyntaxError, ValueError, RecursionError):
        return ()
    out: list[tuple[str, tuple[str, ...], int]] = []
    _walk(tree.body, (), out)
    return tuple(out)


def _walk(body: list[ast.stmt], conds: tuple[str, ...], out: list, local: frozenset[str] = frozenset()) -> None:
    """Collect imports with the conditions of the branches around them; in a function (a lazy
    ``__getattr__(name)``), tests on its parameters say which name was asked for, not which
    copy runs, so they are not conditions."""
    for node in body:
        if isinstance(node, ast.If):
            test = _runtime(node.test)
            if isinstance(test, str) and local & {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)}:
                test = True if node.body else test
                _walk(node.body, conds, out, local)
                _walk(node.orelse, conds, out, local)
                continue
            if test is not False:
                _walk(node.body, conds if test is True else (*conds, test), out, local)
            if test is not True:
                _walk(node.orelse, conds if test is False else (*conds, _excluded(node.test, test)), out, local)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            for alias in node.names:
                out.append((base, conds, node.lineno))
                if node.level:
                    out.append((f"{base}.{alias.name}".lstrip("."), conds, node.lineno))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names = frozenset(a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs))
            _walk(node.body, conds, out, local | names)
        elif isinstance(node, ast.Try):
            _walk(node.body, conds, out, local)
            for handler in node.handlers:
                _walk(handler.body, conds, out, local)


def _excluded(node: ast.expr, text: str) -> str:
    """The condition of an ``else``: ``not X`` excluded is X itself."""
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
        rest = [v for v in node.values if not (isinstance(v, ast.Name) and v.id == _STATIC_ONLY)]
        if len(rest) == 1:
            return _excluded(rest[0], text)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = _runtime(node.operand)
        if isinstance(inner, str):
            return inner
    return _NOT + text


def _runtime(test: ast.expr) -> str | bool:
    """The test as it runs: ``TYPE_CHECKING`` is False at run time (``TYPE_CHECKING or X`` is
    X); True/False when decided, else the source text of what remains."""
    if isinstance(test, ast.Name) and test.id == _STATIC_ONLY:
        return False
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        rest = [v for v in test.values if not (isinstance(v, ast.Name) and v.id == _STATIC_ONLY)]
        if not rest:
            return False
        if len(rest) < len(test.values):
            return _runtime(rest[0]) if len(rest) == 1 else " or ".join(ast.unparse(v) for v in rest)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _runtime(test.operand)
        return (not inner) if isinstance(inner, bool) else f"not {inner}"
    return ast.unparse(test)

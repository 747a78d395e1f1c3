"""Does the engine's start-up forward run with the draft's layers already set?

An error the target's forward raises with the aux capture on (a bare tensor unpacked as
``(hidden, aux)``, ``tensor + None`` at index 0) is met at start-up when the engine runs a
forward while it starts (a CUDA graph capture, a profile run) *after* its runner hands the ids to
the model; else it is met on the first request. Releases of one engine differ in that order, so
it is read from the code: the profile names the calls that run the start-up forward
(``[checks] startup_forward_after``); a runner call of the entry setter (an
:class:`~flowtrace.model.facts.EntryCallFact`) followed in its own function by one of them, or
made from a helper that such a function calls before one of them, sets the layers first.

This reads the runner's source files (those holding entry calls and those calling their
function), as :mod:`flowtrace.analysis.platform_copies` reads package ``__init__`` files: a small
look beside the indexed facts, memoised per tree.
"""

from __future__ import annotations

import ast
import stat
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterable

from flowtrace.model import facts as F
from flowtrace.sources.checkpoint import CheckpointError, read_regular_file

_MAX_FILE = 2_000_000
_DEPTH = 4  # callers followed up from the function that calls the setter
_SPECIFIC = 40  # a name called in more files than this is too common to follow by name


@dataclass(frozen=True, slots=True)
class _Function:
    """One function of a file: its name, lines and the calls it makes (name, line)."""

    name: str
    start: int
    end: int
    calls: tuple[tuple[str, int, bool], ...]  # (called name, line, with arguments)


def _called(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        f = node.func
        return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
    return None


def _read(path: str) -> bytes:
    """A regular file's bytes (a FIFO or device behind a ``.py`` name must not hang the check)."""
    try:
        return read_regular_file(path, _MAX_FILE)
    except CheckpointError:
        return b""


@lru_cache(maxsize=8192)
def _functions(path: str, mtime: int) -> tuple[_Function, ...]:
    """Every function of the file with the calls in its body (read once per file version)."""
    text = _read(path)
    try:
        tree = ast.parse(text) if text else None
    except (SyntaxError, ValueError, RecursionError):
        return ()
    out = []
    for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))) if tree else ():
        calls = tuple(
            (name, node.lineno, bool(node.args or node.keywords))  # type: ignore[attr-defined]
            for node in ast.walk(fn) if (name := _called(node)) is not None
        )
        out.append(_Function(fn.name, fn.lineno, fn.end_lineno or fn.lineno, calls))
    return tuple(out)


@lru_cache(maxsize=8192)
def _bytes(path: str, mtime: int) -> bytes:
    return _read(path)


def _stat(root: Path, rel: str) -> tuple[str, int] | None:
    """(path, mtime) of a regular file; None for anything else (folders, FIFOs, devices)."""
    p = root / rel
    try:
        st = p.stat()
    except OSError:
        return None
    return (str(p), st.st_mtime_ns) if stat.S_ISREG(st.st_mode) else None


def _runs_after(fn: _Function, line: int, names: frozenset[str]) -> bool:
    return any(name in names and at > line for name, at, _ in fn.calls)


def _enclosing(functions: tuple[_Function, ...], line: int) -> _Function | None:
    inside = [f for f in functions if f.start <= line <= f.end]
    return max(inside, key=lambda f: f.start, default=None)


def layers_set_before_startup_forward(
    root: Path, calls: Iterable[F.EntryCallFact], files: Iterable[str], names: Iterable[str], *, with_ids: bool = False,
) -> bool | None:
    """True when a runner call of the entry setter (``with_ids``: one that hands it arguments,
    the draft's ids, not a bare ``set_x()`` that applies the default) precedes a call of
    ``names`` (the calls that run the start-up forward) in its own function, or in a function
    that reaches it through calls made before one of ``names`` (callers followed by name, a few
    levels up, in ``files``, through names specific enough to follow); False when none does;
    None when there is no runner call to judge by."""
    wanted = frozenset(names)
    calls = list(calls)
    if not calls or not wanted:
        return None
    frontier: set[str] = set()
    for call in calls:
        where = _stat(root, call.location.file)
        fn = _enclosing(_functions(*where), call.location.line) if where else None
        if fn is None:
            continue
        if with_ids and not any(n == call.method and at == call.location.line and args for n, at, args in fn.calls):
            continue
        if _runs_after(fn, call.location.line, wanted):
            return True
        frontier.add(fn.name)
    stats = [s for s in (_stat(root, rel) for rel in files) if s is not None]
    texts = [(s, _bytes(*s)) for s in stats]
    seen = set(frontier)
    for _ in range(_DEPTH):
        holding = {name: [s for s, text in texts if f"{name}(".encode() in text] for name in frontier if not name.startswith("__")}
        frontier = {name for name, where in holding.items() if len(where) <= _SPECIFIC}
        targets = dict.fromkeys(s for name in frontier for s in holding[name])
        found: set[str] = set()
        for s in targets:
            for fn in _functions(*s):
                if fn.name in seen:
                    continue  # already on the way up (a call of its own name inside it is another object's method)
                for name, at, _ in fn.calls:
                    if name in frontier:
                        if _runs_after(fn, at, wanted):
                            return True
                        found.add(fn.name)
        frontier = found - seen
        seen |= found
        if not frontier:
            break
    return False


__all__ = ["layers_set_before_startup_forward"]

"""Parse one file into facts, safely: limits, encodings, and every failure as a diagnostic.

This is the function the process pool runs. It takes bytes, never imports or executes them,
and always returns a :class:`FileFacts` (possibly empty with a diagnostic) instead of raising.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import gc
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import NoReturn

from flowtrace.model import facts as F
from flowtrace.engines.profiles import Conventions
from flowtrace.index.syntax import decode

DEFAULT_MAX_BYTES = 4 * 1024 * 1024
DEFAULT_TIMEOUT_S = 20.0


class _Timeout(Exception):
    pass


@contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Abandon a parse that runs too long (SIGALRM; only possible on the main thread)."""
    usable = seconds > 0 and hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return

    def on_alarm(signum: int, frame: FrameType | None) -> NoReturn:  # noqa: ARG001
        raise _Timeout()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextmanager
def quiet_allocations() -> Iterator[None]:
    """No cyclic GC inside: parsing allocates millions of short-lived, acyclic nodes, and the
    index keeps thousands of acyclic facts alive, so every collection would traverse a heap
    that only grows, over and over (a cost that grows faster than the tree). Refcounting
    frees all of it; collection resumes after (and collects any cycle made meanwhile)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


TEST_HOOK_ENV = "FLOWTRACE_TEST_PARSE_HOOK"
_TEST_HOOK_LINE = b"# flowtrace-test-hook: "


def run_test_hook(data: bytes) -> None:
    """For the tests only, with ``FLOWTRACE_TEST_PARSE_HOOK=1`` in the environment: a file whose
    first line is ``# flowtrace-test-hook: hang|exit|segv`` makes its parse behave like a parse
    stuck in native code (signals blocked, so the in-process limit cannot fire), a worker
    that dies, or a native parser crash. Without the variable this is one ``startswith``."""
    if not data.startswith(_TEST_HOOK_LINE) or os.environ.get(TEST_HOOK_ENV) != "1":
        return
    action = data[len(_TEST_HOOK_LINE) :].split(b"\n", 1)[0].strip()
    if action == b"hang":
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        while True:
            time.sleep(3600)
    elif action == b"exit":
        os._exit(70)
    elif action == b"segv":
        import faulthandler

        faulthandler.disable()  # a test runner's handler would print this child's stack
        os.kill(os.getpid(), signal.SIGSEGV)


def warm_up(conv: Conventions) -> None:
    """Import and exercise the parser and analysers once, so that processes forked from this
    one start ready (and share those pages) instead of each paying for it."""
    analyze_bytes("warm_up.py", b"import a\nclass A(B):\n    def f(self):\n        return [x for x in y]\n", conv)


MAX_NESTING = 1000  # weighted AST depth; real engine code stays under 30


def _screen(data: bytes) -> tuple[tuple[int, str] | None, object]:
    """``(problem, tree)``: ``problem`` is (line, reason) when the analysers must not read
    this file, else None, and then ``tree`` is the file's ``ast.Module`` (the one parse of
    the file).

    The stdlib parser has guards (200 brackets, its own stack limits) and never executes
    anything. Past it, a weighted depth limit refuses code nested deeper than any engine's
    (MAX_NESTING; an ``and``/``or`` chain counts per operand): the analysers' few recursive
    helpers (dotted names, ``ast.unparse``) then never meet the recursion limit halfway
    through a file. (The limit was first set for libcst's unguarded native parser, which
    overflowed its stack on such files.) Files the parser rejects are reported with its
    message, as the class-table tier does.
    """
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(data)
    except SyntaxError as exc:
        message = str(exc.msg or "invalid syntax")
        if "too many" in message or "too complex" in message:
            return (exc.lineno or 0, f"nesting too deep to parse ({message})"), None
        if "encoding" in message or "codec" in message or "decode" in message:
            return (exc.lineno or 0, f"cannot decode: {message}"), None
        return (exc.lineno or 0, f"syntax error: {message}"), None
    except (RecursionError, MemoryError):
        return (0, "nesting too deep to parse (the stdlib parser gave up)"), None
    except ValueError as exc:
        return (0, f"cannot parse: {exc}"), None
    deep = _too_deep(tree, 1, _line_ends(data))
    if deep is not None:
        return (getattr(deep, "lineno", 0), f"nesting too deep to parse (over {MAX_NESTING} levels)"), None
    return None, tree


# A node's subtree nests at most SPAN_LEVELS weighted levels per byte of the node's own
# span, plus SPAN_SLACK levels that take no byte of their own (see _too_deep).
SPAN_LEVELS = 2
SPAN_SLACK = 4


def _line_ends(data: bytes) -> list[int] | None:
    """``ends[k]``: the offset just past line ``k`` (``ends[0] == 0``), lines as the parser
    counts them (``\\n``, ``\\r\\n``, ``\\r``), so lines ``a..b`` hold ``ends[b] - ends[a - 1]``
    bytes. None unless the file is UTF-8 (the default, or a BOM or cookie saying so): another
    codec's text need not break lines where the bytes do."""
    import io
    import itertools
    import tokenize

    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError:
        return None
    if encoding not in ("utf-8", "utf-8-sig"):
        return None
    return [0, *itertools.accumulate(map(len, data.splitlines(keepends=True)))]


@functools.cache
def _compound_kinds() -> frozenset[type]:
    """Statements that hold statements (``if``, ``def``, ``try``...), and ``except`` clauses."""
    return frozenset(
        c for c in (*ast.stmt.__subclasses__(), ast.ExceptHandler) if {"body", "cases"} & set(getattr(c, "_fields", ()))
    )


def _first_line(node: ast.AST) -> int:
    """Where a statement's text starts: a decorated definition's first decorator."""
    decorators = getattr(node, "decorator_list", None)
    line: int = node.lineno  # type: ignore[attr-defined]  # a statement
    return min(line, *(d.lineno for d in decorators)) if decorators else line


def _too_deep(root: ast.AST, depth: int, ends: list[int] | None, *, prune: bool = True) -> ast.AST | None:
    """The first node, in walk order, whose weighted depth passes MAX_NESTING (None when none
    does).

    ``prune`` skips the subtree of a node whose span is too short to hold MAX_NESTING levels
    below the node's depth: a one-line span by its columns, a longer one by its lines' bytes
    (``ends``, see :func:`_line_ends`; None: never). Each level of a chain takes at least one
    byte of its parent's span (a unary ``-`` exactly one; a bracket, a dot, an ``or`` operand,
    a nested block's keyword more), except wrappers that take none (a statement ``Expr``, a
    ``MatchValue``, an operator leaf, one position-less node such as a ``comprehension`` or a
    ``match_case`` between two nodes that have spans); SPAN_LEVELS and SPAN_SLACK bound those
    twice over. A definition's span starts at its first decorator (the ``def`` line is its
    ``lineno``). Only subtrees that cannot pass the limit are skipped, the rest keeps its
    order, so the verdict and its line are those of the whole walk. Never pruned: nothing
    inside an f-string that was not pruned whole (before Python 3.12 the parts of an f-string
    carry the whole string's span or shifted ones: only the string's own span is trustworthy).

    No helper call per node: most nodes met are pruned at once, and a call per node was a
    third of the walk.
    """
    node_type, bool_op, joined, lst = ast.AST, ast.BoolOp, ast.JoinedStr, list
    compound, lines = _compound_kinds(), ends or []
    room = MAX_NESTING - SPAN_SLACK  # a node at ``depth`` with span ``size`` is safe when depth + 2 * size <= room
    stack = [(root, depth)]
    pop, push = stack.pop, stack.append
    while stack:
        node, depth = pop()
        kind = node.__class__
        if kind is bool_op:
            depth += len(node.values) - 1  # type: ignore[attr-defined]  # kind is ast.BoolOp
        if depth > MAX_NESTING:
            return node
        if prune:
            last: int | None = getattr(node, "end_lineno", None)
            if last is not None:
                # a node with an end line has the other positions too (ast.AST declares none of them)
                first: int = node.lineno if kind not in compound else _first_line(node)  # type: ignore[attr-defined]
                if last == first:
                    size: int = node.end_col_offset - node.col_offset  # type: ignore[attr-defined]
                else:  # by lines; without them, as long as the limit
                    size = lines[last] - lines[first - 1] if last < len(lines) else MAX_NESTING
                if depth + SPAN_LEVELS * size <= room:
                    continue
            if kind is joined:
                found = _too_deep(node, depth, None, prune=False)
                if found is not None:
                    return found
                continue
        depth += 1
        for field in node._fields:
            value = getattr(node, field, None)
            if value.__class__ is lst:
                for item in value:
                    if isinstance(item, node_type):
                        push((item, depth))
            elif isinstance(value, node_type) and field != "ctx":
                push((value, depth))
    return None


def matters(data: bytes, markers: tuple[bytes, ...]) -> bool:
    """The byte prefilter: a file that names none of the profile's markers cannot matter."""
    return any(m in data for m in _shortest(markers))


_SHORTEST: dict[tuple[bytes, ...], tuple[bytes, ...]] = {}


def _shortest(markers: tuple[bytes, ...]) -> tuple[bytes, ...]:
    """``markers`` without those that contain another marker (a file naming one names the
    other): the same verdict in fewer scans of every file of the tree."""
    found = _SHORTEST.get(markers)
    if found is None:
        found = tuple(m for m in markers if not any(o != m and o in m for o in markers)) if all(markers) else markers
        _SHORTEST[markers] = found
    return found


def _with_sources(facts: F.FileFacts, source: str, conv: Conventions, tree: ast.Module) -> F.FileFacts:
    """Add the setter-less facts (config attributes, builders, hooks) when a profile asks.
    ``tree``: the file's one stdlib tree (read-only)."""
    from flowtrace.index import config_sources

    if not config_sources.wanted(conv):
        return facts
    imports = {i.local: i.qualified for i in facts.imports}
    local = {c.name: c.qualname for c in facts.classes}

    def resolve(name: str) -> str:
        head, _, rest = name.partition(".")
        base = local.get(head) or imports.get(head)
        return (f"{base}.{rest}" if rest else base) if base else name

    found = config_sources.source_facts(facts.path, facts.module, source, tree, conv, resolve)
    return dataclasses.replace(facts, sources=found) if found else facts


def id_functions(
    path: str, module_name: str, tree: ast.Module, source: str, names: frozenset[str]
) -> tuple[F.IdFunctionFact, ...]:
    """The module-level functions a profile method names as its default-id computation (the
    source is split into lines only for a file that defines one: most files define none)."""
    lines: list[str] | None = None
    out = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            lines = lines if lines is not None else source.splitlines()
            text = "\n".join(lines[node.lineno - 1 : node.end_lineno or node.lineno])
            parameters = tuple(a.arg for a in (*node.args.posonlyargs, *node.args.args))
            out.append(
                F.IdFunctionFact(
                    f"{module_name}.{node.name}", node.name, F.Location(path, node.lineno), parameters, text
                )
            )
    return tuple(out)


def analyze_bytes(
    path: str,
    data: bytes,
    conv: Conventions,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> F.FileFacts:
    """Facts of one file, read from the stdlib tree the pre-screen builds (one parse)."""
    from flowtrace.index import runner_steps
    from flowtrace.index.entry_calls import runner_facts
    from flowtrace.index.syntax import module_name
    from flowtrace.index.visitors import FileAnalyzer

    modname = module_name(path, conv.package)
    if len(data) > max_bytes:
        return F.FileFacts.unparsed(
            path, modname, f"file is larger than the {max_bytes}-byte limit; not parsed", F.DiagnosticKind.TOO_LARGE
        )
    if b"\x00" in data:
        return F.FileFacts.unparsed(
            path, modname, "contains NUL bytes (binary?); not parsed", F.DiagnosticKind.PARSE_ERROR
        )
    old_limit = sys.getrecursionlimit()
    try:
        sys.setrecursionlimit(max(old_limit, 6000))
        with _time_limit(timeout_s), quiet_allocations():
            problem, tree = _screen(data)
            if problem is not None:
                return F.FileFacts.unparsed(path, modname, problem[1], F.DiagnosticKind.PARSE_ERROR, problem[0])
            module: ast.Module = tree  # type: ignore[assignment]  # no problem: the screen's tree
            source = decode(data, strict=True)  # the parser lets undecodable comments pass
            analyzer = FileAnalyzer(path, source, module, conv)
            facts = analyzer.facts()
            entry_calls, predicates = runner_facts(path, data, module, conv)
            if entry_calls or predicates:
                facts = dataclasses.replace(facts, entry_calls=entry_calls, interface_predicates=predicates)
            if runner_steps.wanted(data, conv):
                imports = {i.local: i.qualified for i in facts.imports}
                runner = runner_steps.runner_functions(path, modname, module, conv, imports, analyzer.lines)
                if runner:
                    facts = dataclasses.replace(facts, runner_functions=runner)
            if conv.id_functions:
                functions = id_functions(path, modname, module, source, conv.id_functions)
                if functions:
                    facts = dataclasses.replace(facts, id_functions=functions)
            return _with_sources(facts, source, conv, module)
    except _Timeout:
        return F.FileFacts.unparsed(
            path, modname, f"parse took over {timeout_s:g}s; abandoned", F.DiagnosticKind.TIMEOUT
        )
    except RecursionError:
        return F.FileFacts.unparsed(
            path, modname, "nesting too deep to parse (recursion limit)", F.DiagnosticKind.PARSE_ERROR
        )
    except (UnicodeDecodeError, LookupError, SyntaxError) as exc:
        if isinstance(exc, (KeyError, IndexError)):  # LookupErrors of the analyser, not of a codec
            return F.FileFacts.unparsed(
                path,
                modname,
                f"internal error while analysing ({type(exc).__name__}: {exc})",
                F.DiagnosticKind.INTERNAL,
            )
        return F.FileFacts.unparsed(path, modname, f"cannot decode: {exc}", F.DiagnosticKind.PARSE_ERROR)
    except MemoryError:
        return F.FileFacts.unparsed(path, modname, "out of memory while parsing", F.DiagnosticKind.PARSE_ERROR)
    except Exception as exc:  # noqa: BLE001 - one file's analyser bug must not end the scan
        return F.FileFacts.unparsed(
            path, modname, f"internal error while analysing ({type(exc).__name__}: {exc})", F.DiagnosticKind.INTERNAL
        )
    finally:
        sys.setrecursionlimit(old_limit)

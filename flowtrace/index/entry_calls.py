"""Where the engine's runner hands the draft's ids to the model, and what guards the call.

A model class without the entry setter is not simply "captures nothing": the runner calls the
setter on it (``self.model.set_x(ids)``) and raises ``AttributeError``, or checks first and
raises itself (``if not hasattr(model, "set_x"): raise``, ``if not supports_x(model): raise``),
or skips the call with a warning. Which one is a property of each call site, read here from
the code: a call of a profile setter outside every setter body, and the model test before or
around it. Nothing here names an engine: the setter and interface names come from the profile.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from flowtrace.index.returns import nodes  # ast.walk's nodes and order, less the contexts
from flowtrace.model import facts as F
from flowtrace.engines.profiles import Conventions


@dataclass(frozen=True, slots=True)
class _Test:
    """A condition that tests the model: what it requires and whether it is negated."""

    requires: str
    negated: bool
    text: str


# The guard in force for a block: how it stops the call, the model test, the raise (None: a skip).
_Guard = tuple[F.EntryGuard, _Test, ast.Raise | None]


def _requirement(node: ast.expr, conv: Conventions) -> str | None:
    """``hasattr(m, "<setter>")`` -> method:<setter>; ``isinstance(m, <Interface>)`` ->
    interface:<Interface>; ``f(m)`` with one argument -> predicate:f (resolved later)."""
    if not isinstance(node, ast.Call):
        return None
    name = (
        node.func.id
        if isinstance(node.func, ast.Name)
        else node.func.attr if isinstance(node.func, ast.Attribute) else None
    )
    if name == "hasattr" and len(node.args) == 2 and isinstance(node.args[1], ast.Constant):
        value = node.args[1].value
        return f"method:{value}" if value in conv.setters else None
    if name == "isinstance" and len(node.args) == 2:
        last = ast.unparse(node.args[1]).rsplit(".", 1)[-1]
        return f"interface:{last}" if last in conv.interfaces else None
    if name and len(node.args) == 1 and not node.keywords and isinstance(node.func, ast.Name):
        return f"predicate:{name}"
    return None


def _model_test(test: ast.expr, conv: Conventions) -> _Test | None:
    negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
    inner = test.operand if isinstance(test, ast.UnaryOp) and negated else test
    requires = _requirement(inner, conv)
    return _Test(requires, negated, ast.unparse(test)) if requires else None


def _first_raise(body: list[ast.stmt]) -> ast.Raise | None:
    """The raise a failed check ends in (directly in its block), or None (it warns, returns)."""
    return next((s for s in body if isinstance(s, ast.Raise)), None)


def _exits(body: list[ast.stmt]) -> bool:
    return any(isinstance(s, (ast.Raise, ast.Return, ast.Continue, ast.Break)) for s in body)


class _Walker:
    """Walks one function's statements, keeping the model checks in force at each call."""

    def __init__(self, path: str, function: str, offset: int, conv: Conventions) -> None:
        self.path, self.function, self.offset, self.conv = path, function, offset, conv
        self.out: list[F.EntryCallFact] = []

    def loc(self, node: ast.AST) -> F.Location:
        return F.Location(self.path, node.lineno + self.offset)  # type: ignore[attr-defined]

    def block(self, body: list[ast.stmt], guard: _Guard | None) -> None:
        """``guard``: (EntryGuard, _Test, raise node or None) in force for this block."""
        for stmt in body:
            if isinstance(stmt, ast.If):
                test = _model_test(stmt.test, self.conv)
                if test is not None and test.negated and _exits(stmt.body):
                    # `if not check(m): raise/return` before the call: later statements are guarded
                    self.calls_in(stmt.test, guard)
                    self.block(stmt.body, guard)
                    raised = _first_raise(stmt.body)
                    guard = (F.EntryGuard.RAISES if raised else F.EntryGuard.SKIPS, test, raised)
                    self.block(stmt.orelse, guard)
                    continue
                if test is not None and not test.negated:
                    raised = _first_raise(stmt.orelse)
                    self.block(stmt.body, (F.EntryGuard.RAISES if raised else F.EntryGuard.SKIPS, test, raised))
                    self.block(stmt.orelse, guard)
                    continue
                self.calls_in(stmt.test, guard)
                self.block(stmt.body, guard)
                self.block(stmt.orelse, guard)
            elif isinstance(stmt, (ast.For, ast.While, ast.With, ast.Try)):
                for field in ("body", "orelse", "finalbody"):
                    self.block(getattr(stmt, field, []) or [], guard)
                for handler in getattr(stmt, "handlers", []):
                    self.block(handler.body, guard)
                if isinstance(stmt, (ast.For, ast.While)):
                    self.calls_in(stmt.iter if isinstance(stmt, ast.For) else stmt.test, guard)
            elif not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.calls_in(stmt, guard)

    def calls_in(self, node: ast.AST, guard: _Guard | None) -> None:
        for sub in nodes(node):
            if not (
                isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr in self.conv.setters
            ):
                continue
            receiver = sub.func.value
            if (
                (isinstance(receiver, ast.Name) and receiver.id in ("self", "cls"))
                or isinstance(receiver, ast.Call)
                and ast.unparse(receiver.func) == "super"
            ):
                continue  # the model's own call, not a runner's
            where = self.loc(sub)
            if guard is None:
                self.out.append(
                    F.EntryCallFact(self.function, sub.func.attr, where, F.EntryGuard.NONE, raises_at=where)
                )
                continue
            kind, test, raised = guard
            self.out.append(F.EntryCallFact(
                self.function, sub.func.attr, where, kind, test.requires, test.text,
                self.loc(raised) if raised is not None else None,
            ))


def _functions(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """(qualified function name, node) for every function outside a setter, classes included."""
    stack: list[tuple[str, ast.AST]] = [("", tree)]
    while stack:
        prefix, node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                stack.append((f"{prefix}{child.name}.", child))
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield f"{prefix}{child.name}", child
                stack.append((f"{prefix}{child.name}.", child))


def runner_facts(
    path: str, data: bytes, tree: ast.Module, conv: Conventions
) -> tuple[tuple[F.EntryCallFact, ...], tuple[F.InterfacePredicate, ...]]:
    """Both facts of this module from the stdlib tree the parser screened the file with (no
    second parse); cheap byte gates keep them off the files that name no setter call."""
    calls = entry_calls(path, tree, conv) if any(f".{s}(".encode() in data for s in conv.setters) else ()
    found = b"isinstance" in data and any(i.encode() in data for i in conv.interfaces)
    return calls, interface_predicates(path, tree, conv) if found else ()


def entry_calls(path: str, tree: ast.Module, conv: Conventions) -> tuple[F.EntryCallFact, ...]:
    """Every runner call of an entry setter in the module, with its guard (see the module doc)."""
    out: list[F.EntryCallFact] = []
    for name, fn in _functions(tree):
        if fn.name in conv.setters:
            continue  # a setter delegating to its holder is the chain, not the runner
        walker = _Walker(path, name, 0, conv)
        walker.block(fn.body, None)
        out.extend(walker.out)
    out.sort(key=lambda c: (c.location.line, c.method))
    return tuple(out)


def interface_predicates(path: str, tree: ast.Module, conv: Conventions) -> tuple[F.InterfacePredicate, ...]:
    """Module-level ``def f(x): return isinstance(x, I)`` for a profile interface ``I``."""
    out = []
    for fn in tree.body:
        if not isinstance(fn, ast.FunctionDef) or not fn.body:
            continue
        last = fn.body[-1]
        if isinstance(last, ast.Return) and last.value is not None:
            requires = _requirement(last.value, conv)
            if requires and requires.startswith("interface:"):
                out.append(F.InterfacePredicate(fn.name, requires.split(":", 1)[1], F.Location(path, fn.lineno)))
    return tuple(out)

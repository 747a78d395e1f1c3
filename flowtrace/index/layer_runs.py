"""Calls in a capturing forward that run decoder layers themselves (another forward path).

A forward that records states in its layer loop may hand some layers to a second routine for
some batches: ``model_forward_x(layers=self.layers[k:end], ...)`` after the loop when a batch
is split for overlap, or the whole list instead of the loop. Those layers then run without the
capture unless the routine is handed the collector (or the capture attribute). This module
finds such calls structurally: an argument that is the decoder-layer list (``self.<layers>``)
or a slice of it, in a method that has a capture site; and the tests the call runs under,
followed one step back through the names they read (``if end != self.end_layer`` where ``end``
is reassigned under ``if batch.can_overlap``). Which batch flag means which path is profile data
(``[serving] batch_paths``), read by :mod:`flowtrace.analysis.forward_paths`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from flowtrace.index.context import ClassInfo, FileContext
from flowtrace.index.returns import nodes
from flowtrace.index.syntax import FunctionNode, arguments, dotted, inner_blocks
from flowtrace.model import facts as F


def _layers_argument(value: ast.expr, layers: frozenset[str]) -> tuple[str, bool] | None:
    """(text, whole) when ``value`` is ``self.<layers>`` or ``self.<layers>[a:b]``."""
    if isinstance(value, ast.Attribute) and value.attr in layers and dotted(value) == f"self.{value.attr}":
        return ast.unparse(value), True
    if isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Slice):
        base = value.value
        if isinstance(base, ast.Attribute) and base.attr in layers and dotted(base) == f"self.{base.attr}":
            return ast.unparse(value), False
    return None


Arm = tuple[ast.expr, bool]  # an enclosing if-test, and whether the statement is in its body (else: its else arm)

# The blocks whose statements keep the if-arms around them; statements under any other compound
# (a ``match``, a ``try``/``except*``) are read for their assignments but have no known arms, and a
# call under such a compound is held by the compound itself.
_PLAIN_BLOCKS = (ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try)


@dataclass(frozen=True, slots=True)
class _Method:
    """What the questions below read of one method, gathered in one walk of its statements (each
    question used to walk the method again, once per arm or assignment it asked about).

    ``arms``: each statement reached through if/loop/with/try blocks, with the if-tests enclosing
    it and the arm it sits in; ``assigns``: the plain assignments in source order (nested
    definitions left out), each with the names it binds; ``statements``: the first statement in
    that order, other than an if/loop/with/try, that holds each call."""

    arms: dict[ast.stmt, tuple[Arm, ...]] = field(default_factory=dict)
    assigns: list[tuple[ast.Assign, frozenset[str]]] = field(default_factory=list)
    statements: dict[ast.Call, ast.stmt] = field(default_factory=dict)

    def tests(self, stmt: ast.stmt | None) -> tuple[ast.expr, ...]:
        """The if-tests enclosing ``stmt`` (none when it is not reached); an else arm's test is
        kept as written (it is read for the names it tests, not for its truth)."""
        return tuple(test for test, _ in self.arms.get(stmt, ())) if stmt is not None else ()

    def assignments(self, name: str) -> list[ast.Assign]:
        return [stmt for stmt, names in self.assigns if name in names]


def _method(fn: FunctionNode) -> _Method:
    method = _Method()
    _gather(fn.body, (), method)
    return method


def _gather(body: list[ast.stmt], arms: tuple[Arm, ...] | None, into: _Method) -> None:
    """:func:`_method`'s walk, in :func:`~flowtrace.index.syntax.walk_statements`' order."""
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if arms is not None:
            into.arms[stmt] = arms
        if isinstance(stmt, ast.Assign):
            bound = frozenset(n.id for t in stmt.targets for n in ast.walk(t) if isinstance(n, ast.Name))
            into.assigns.append((stmt, bound))
        if not isinstance(stmt, (ast.If, *_PLAIN_BLOCKS)):
            for node in ast.walk(stmt):
                if isinstance(node, ast.Call):
                    into.statements.setdefault(node, stmt)
        if isinstance(stmt, ast.If):
            for block, arm in ((stmt.body, True), (stmt.orelse, False)):
                _gather(block, None if arms is None else arms + ((stmt.test, arm),), into)
        else:
            inner = arms if isinstance(stmt, _PLAIN_BLOCKS) else None
            for block in inner_blocks(stmt):
                _gather(block, inner, into)


def _deciding_tests(method: _Method, tests: tuple[ast.expr, ...]) -> tuple[ast.expr, ...]:
    """``tests`` plus the tests under which the names they read are (re)assigned in the method."""
    names = {n.id for t in tests for n in ast.walk(t) if isinstance(n, ast.Name)}
    more: list[ast.expr] = []
    for stmt, assigned in method.assigns:
        if assigned & names:
            more.extend(t for t in method.tests(stmt) if t not in more and t not in tests)
    return tests + tuple(more)


def _self_attribute(node: ast.expr) -> str | None:
    """``<name>`` of ``self.<...>.<name>`` (or of ``len(...)`` of one)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len" and len(node.args) == 1:
        node = node.args[0]
    if isinstance(node, ast.Attribute) and (dotted(node) or "").startswith("self."):
        return node.attr
    return None


def _off_in(arm: Arm) -> set[str]:
    """Attributes that must be falsy for the arm to run: ``not self.x`` among the operands of an
    ``and`` in a body, ``self.x`` among those of an ``or`` in an else arm."""
    test, body = arm
    joined = ast.And if body else ast.Or
    operands = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, joined) else [test]
    out = set()
    for node in operands:
        if body and isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            node = node.operand
        elif body:
            continue
        name = _self_attribute(node)
        if name:
            out.add(name)
    return out


def _changed_name(test: ast.expr, method: _Method) -> str | None:
    """``n`` when ``test`` holds only once ``n`` was re-assigned: ``n != <its first value>``
    (``if end != self.end_layer`` after ``end = self.end_layer``)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.NotEq)):
        return None
    for name, other in ((test.left, test.comparators[0]), (test.comparators[0], test.left)):
        if isinstance(name, ast.Name):
            first = next(iter(method.assignments(name.id)), None)
            if first is None or method.arms.get(first) != ():
                continue
            if ast.dump(first.value) == ast.dump(other):
                return name.id
    return None


def _capture_off(method: _Method, stmt: ast.stmt) -> tuple[str, ...]:
    """The ``self`` attributes that must be falsy for ``stmt`` to run: tested off by an arm
    around it, or around every later assignment of a name its test needs changed."""
    off: set[str] = set()
    for arm in method.arms.get(stmt, ()):
        off |= _off_in(arm)
        name = _changed_name(arm[0], method) if arm[1] else None
        changes = method.assignments(name)[1:] if name else []
        if changes:
            off |= set.intersection(*(set().union(*map(_off_in, method.arms.get(s, ()))) for s in changes))
    return tuple(sorted(off))


def layer_runs(
    file: FileContext, info: ClassInfo, fn: FunctionNode, sites: list[F.CaptureSiteFact]
) -> list[F.LayerRunFact]:
    """The layer-running calls of a capturing method (see the module doc)."""
    layers = file.conv.layers_attributes
    containers = {s.container for s in sites if s.container}
    attributes = {s.attribute for s in sites if s.attribute} | set(file.conv.attributes)
    out: list[F.LayerRunFact] = []
    method: _Method | None = None  # gathered at the first layer-running call
    walked = nodes(fn)  # ast.walk's nodes and order (less the contexts), walked once
    iterated = {
        id(n)
        for loop in walked
        if isinstance(loop, (ast.For, ast.AsyncFor, ast.comprehension))
        for n in nodes(loop.iter)
    }
    # a loop's own `islice(self.layers, a, b)` is the loop
    for call in (n for n in walked if isinstance(n, ast.Call) and id(n) not in iterated):
        handed = [(_layers_argument(a.value, layers), a) for a in arguments(call)]
        found = next((h for h, _ in handed if h is not None), None)
        if (
            found is None
            or isinstance(call.func, ast.Name)
            and call.func.id in ("len", "enumerate", "zip", "range", "list", "iter", "reversed")
        ):
            continue
        text, whole = found
        capture = any(
            isinstance(n, ast.Name) and n.id in containers or isinstance(n, ast.Attribute) and n.attr in attributes
            for a in arguments(call) for n in nodes(a.value)
        )
        method = method or _method(fn)
        stmt = method.statements.get(call)
        direct = method.tests(stmt)
        tests = _deciding_tests(method, direct)
        flags = tuple(dict.fromkeys(n.attr for t in tests for n in nodes(t) if isinstance(n, ast.Attribute)))
        out.append(F.LayerRunFact(
            info.qualname, f"{info.name}.{fn.name}", file.loc(call), dotted(call.func) or ast.unparse(call.func),
            text, whole, capture, " and ".join(ast.unparse(t) for t in direct), flags,
            _capture_off(method, stmt) if stmt is not None else (),
        ))
    return sorted(out, key=lambda r: r.location.line)


__all__ = ["layer_runs"]

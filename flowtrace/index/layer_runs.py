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

from flowtrace.index.context import ClassInfo, FileContext
from flowtrace.index.syntax import FunctionNode, arguments, dotted, walk_statements
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


def _tests_around(
    body: list[ast.stmt], target: ast.stmt, tests: tuple[ast.expr, ...] = ()
) -> tuple[ast.expr, ...] | None:
    """The if-tests enclosing ``target`` (None when it is not in ``body``); an else arm's test
    is kept as written (it is read for the names it tests, not for its truth)."""
    for stmt in body:
        if stmt is target:
            return tests
        inner: list[tuple[list[ast.stmt], tuple[ast.expr, ...]]] = []
        if isinstance(stmt, ast.If):
            inner = [(stmt.body, tests + (stmt.test,)), (stmt.orelse, tests + (stmt.test,))]
        elif isinstance(stmt, (ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith)):
            inner = [(stmt.body, tests), (getattr(stmt, "orelse", []), tests)]
        elif isinstance(stmt, ast.Try):
            inner = [(stmt.body, tests), (stmt.orelse, tests), (stmt.finalbody, tests)] + [
                (h.body, tests) for h in stmt.handlers
            ]
        for block, more in inner:
            found = _tests_around(block, target, more)
            if found is not None:
                return found
    return None


def _deciding_tests(fn: FunctionNode, tests: tuple[ast.expr, ...]) -> tuple[ast.expr, ...]:
    """``tests`` plus the tests under which the names they read are (re)assigned in ``fn``."""
    names = {n.id for t in tests for n in ast.walk(t) if isinstance(n, ast.Name)}
    more: list[ast.expr] = []
    for stmt in walk_statements(fn.body):
        if isinstance(stmt, ast.Assign) and any(
            isinstance(n, ast.Name) and n.id in names for t in stmt.targets for n in ast.walk(t)
        ):
            around = _tests_around(fn.body, stmt) or ()
            more.extend(t for t in around if t not in more and t not in tests)
    return tests + tuple(more)


Arm = tuple[ast.expr, bool]  # an enclosing if-test, and whether the statement is in its body (else: its else arm)


def _arms_around(body: list[ast.stmt], target: ast.stmt, arms: tuple[Arm, ...] = ()) -> tuple[Arm, ...] | None:
    """The if-tests enclosing ``target``, each with the arm it sits in (None: not in ``body``)."""
    for stmt in body:
        if stmt is target:
            return arms
        inner: list[tuple[list[ast.stmt], tuple[Arm, ...]]] = []
        if isinstance(stmt, ast.If):
            inner = [(stmt.body, arms + ((stmt.test, True),)), (stmt.orelse, arms + ((stmt.test, False),))]
        elif isinstance(stmt, (ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith)):
            inner = [(stmt.body, arms), (getattr(stmt, "orelse", []), arms)]
        elif isinstance(stmt, ast.Try):
            inner = [(stmt.body, arms), (stmt.orelse, arms), (stmt.finalbody, arms)]
            inner += [(h.body, arms) for h in stmt.handlers]
        for block, more in inner:
            found = _arms_around(block, target, more)
            if found is not None:
                return found
    return None


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


def _changed_name(test: ast.expr, fn: FunctionNode) -> str | None:
    """``n`` when ``test`` holds only once ``n`` was re-assigned: ``n != <its first value>``
    (``if end != self.end_layer`` after ``end = self.end_layer``)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.NotEq)):
        return None
    for name, other in ((test.left, test.comparators[0]), (test.comparators[0], test.left)):
        if isinstance(name, ast.Name):
            first = next((s for s in walk_statements(fn.body) if _assigns(s, name.id)), None)
            if not isinstance(first, ast.Assign) or _arms_around(fn.body, first) != ():
                continue
            if ast.dump(first.value) == ast.dump(other):
                return name.id
    return None


def _assigns(stmt: ast.stmt, name: str) -> bool:
    if not isinstance(stmt, ast.Assign):
        return False
    return any(isinstance(n, ast.Name) and n.id == name for t in stmt.targets for n in ast.walk(t))


def _capture_off(fn: FunctionNode, stmt: ast.stmt) -> tuple[str, ...]:
    """The ``self`` attributes that must be falsy for ``stmt`` to run: tested off by an arm
    around it, or around every later assignment of a name its test needs changed."""
    arms = _arms_around(fn.body, stmt) or ()
    off: set[str] = set()
    for arm in arms:
        off |= _off_in(arm)
        name = _changed_name(arm[0], fn) if arm[1] else None
        changes = [s for s in walk_statements(fn.body) if name and _assigns(s, name)][1:]
        if changes:
            off |= set.intersection(*(set().union(*map(_off_in, _arms_around(fn.body, s) or ())) for s in changes))
    return tuple(sorted(off))


def _statement_of(fn: FunctionNode, call: ast.Call) -> ast.stmt | None:
    for stmt in walk_statements(fn.body):
        if not isinstance(stmt, (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try)) and any(
            n is call for n in ast.walk(stmt)
        ):
            return stmt
    return None


def layer_runs(
    file: FileContext, info: ClassInfo, fn: FunctionNode, sites: list[F.CaptureSiteFact]
) -> list[F.LayerRunFact]:
    """The layer-running calls of a capturing method (see the module doc)."""
    layers = file.conv.layers_attributes
    containers = {s.container for s in sites if s.container}
    attributes = {s.attribute for s in sites if s.attribute} | set(file.conv.attributes)
    out: list[F.LayerRunFact] = []
    iterated = {
        id(n)
        for loop in ast.walk(fn)
        if isinstance(loop, (ast.For, ast.AsyncFor, ast.comprehension))
        for n in ast.walk(loop.iter)
    }
    # a loop's own `islice(self.layers, a, b)` is the loop
    for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call) and id(n) not in iterated):
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
            for a in arguments(call) for n in ast.walk(a.value)
        )
        stmt = _statement_of(fn, call)
        direct = (_tests_around(fn.body, stmt) or ()) if stmt is not None else ()
        tests = _deciding_tests(fn, direct)
        flags = tuple(dict.fromkeys(n.attr for t in tests for n in ast.walk(t) if isinstance(n, ast.Attribute)))
        out.append(F.LayerRunFact(
            info.qualname, f"{info.name}.{fn.name}", file.loc(call), dotted(call.func) or ast.unparse(call.func),
            text, whole, capture, " and ".join(ast.unparse(t) for t in direct), flags,
            _capture_off(fn, stmt) if stmt is not None else (),
        ))
    return sorted(out, key=lambda r: r.location.line)


__all__ = ["layer_runs"]

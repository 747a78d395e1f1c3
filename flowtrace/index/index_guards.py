"""Is a capture branch reached at the layer loop's first index? (category 5 of the serving path)

A site that records ``hidden_states + residual`` before layer i raises at the loop's first
index while ``residual`` is still None, but only if the branch holding it is taken there. A
forward may keep a second capture expression on a branch guarded by the loop index
(``if self.enable_x and i > self.first_k_dense_replace: aux.append(all_gather(h + r))``):
with a non-negative bound that branch is never taken at index 0, so it cannot raise there.

This module evaluates the ``if`` tests on the way from the loop body to a site at the first
index, three-valued (true, false, unknown), on intervals: the loop index is 0 there (the rank
whose residual starts as None starts the loop at layer 0); the loop's own start is 0 and its end
at least 1; integer literals are themselves; a value the forward uses as a layer bound (assigned
to the loop's start or end, or sliced into the layer list) is at least 0. Anything else is
unknown, and an unknown test keeps the branch (it may be taken). Only a test that is surely
false on the way proves the branch unreachable.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable

from flowtrace.index.syntax import FunctionNode, walk_statements

Interval = tuple[int | None, int | None]  # (lowest, highest); None: unbounded / unknown
_UNKNOWN: Interval = (None, None)


def _path(
    body: list[ast.stmt], target: ast.AST, tests: tuple[tuple[ast.expr, bool], ...] = ()
) -> tuple[tuple[ast.expr, bool], ...] | None:
    """The (test, taken) pairs from ``body`` down to the statement holding ``target``."""
    for stmt in body:
        if not any(n is target for n in ast.walk(stmt)):
            continue
        if isinstance(stmt, ast.If):
            for block, taken in ((stmt.body, True), (stmt.orelse, False)):
                found = _path(block, target, tests + ((stmt.test, taken),))
                if found is not None:
                    return found
            return tests  # in the test itself
        blocks = [getattr(stmt, f, None) or [] for f in ("body", "orelse", "finalbody")] + [
            h.body for h in getattr(stmt, "handlers", [])
        ]
        for block in blocks:
            found = _path(block, target, tests)
            if found is not None:
                return found
        return tests
    return None


class FirstIndex:
    """The loop's first iteration: what the index and the names around it are worth there."""

    def __init__(self, fn: FunctionNode, loop: ast.For | ast.AsyncFor) -> None:
        self.index = loop.target.id if isinstance(loop.target, ast.Name) else None
        if isinstance(loop.target, ast.Tuple) and loop.target.elts and isinstance(loop.target.elts[0], ast.Name):
            self.index = loop.target.elts[0].id  # for i, layer in enumerate(...)
        start, end = _range_bounds(loop.iter)
        self.starts = _aliases(fn, start)
        self.ends = _aliases(fn, end)
        self.bounds = _layer_bounds(fn, self.starts | self.ends)

    def value(self, node: ast.expr) -> Interval:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value, node.value
        if (
            isinstance(node, ast.UnaryOp)
            and isinstance(node.op, ast.USub)
            and isinstance(node.operand, ast.Constant)
            and type(node.operand.value) is int
        ):
            return -node.operand.value, -node.operand.value
        if isinstance(node, ast.Name) and node.id == self.index:
            return 0, 0
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            return _shifted(self.value(node.left), self.value(node.right), isinstance(node.op, ast.Sub))
        text = ast.unparse(node)
        if text in self.starts:
            return 0, 0
        if text in self.ends:
            return 1, None
        if text in self.bounds:
            return 0, None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len":
            return 0, None
        return _UNKNOWN

    def truth(self, test: ast.expr) -> bool | None:
        """True, False or None (unknown) at the first index."""
        if isinstance(test, ast.BoolOp):
            values = [self.truth(v) for v in test.values]
            if isinstance(test.op, ast.And):
                return False if False in values else True if all(v is True for v in values) else None
            return True if True in values else False if all(v is False for v in values) else None
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = self.truth(test.operand)
            return None if inner is None else not inner
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _COMPARE:
            return _compare(self.value(test.left), self.value(test.comparators[0]), _COMPARE[type(test.ops[0])])
        if isinstance(test, ast.Name) and test.id == self.index:
            return False  # `if i:` at index 0
        return None

    def unreachable(self, body: list[ast.stmt], target: ast.AST) -> bool:
        """A test on the way from the loop body to ``target`` is surely the other way at the first index."""
        path = _path(body, target) or ()
        return any(self.truth(test) is (not taken) for test, taken in path)


def _shifted(a: Interval, b: Interval, minus: bool) -> Interval:
    if minus:
        b = (-b[1] if b[1] is not None else None, -b[0] if b[0] is not None else None)
    low = a[0] + b[0] if a[0] is not None and b[0] is not None else None
    high = a[1] + b[1] if a[1] is not None and b[1] is not None else None
    return low, high


def _compare(a: Interval, b: Interval, op: Callable[[int, int], bool]) -> bool | None:
    """``a op b`` when every pair of values in the intervals agrees, else None."""
    (a_low, a_high), (b_low, b_high) = a, b
    if op in (operator.gt, operator.ge):  # a > b  <=>  b < a
        return _compare(b, a, operator.lt if op is operator.gt else operator.le)
    if op in (operator.lt, operator.le):
        strict = op is operator.lt
        if a_high is not None and b_low is not None and (a_high < b_low if strict else a_high <= b_low):
            return True
        if a_low is not None and b_high is not None and (a_low >= b_high if strict else a_low > b_high):
            return False
        return None
    same = a_low is not None and a_low == a_high == b_low == b_high
    apart = (a_high is not None and b_low is not None and a_high < b_low) or (
        b_high is not None and a_low is not None and b_high < a_low
    )
    if op is operator.eq:
        return True if same else False if apart else None
    return False if same else True if apart else None  # !=


_COMPARE: dict[type, Callable[[int, int], bool]] = {
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}


def _range_bounds(iterable: ast.expr) -> tuple[ast.expr | None, ast.expr | None]:
    """(start, end) of ``range(start, end)`` / ``range(end)``; (None, None) otherwise."""
    if (
        isinstance(iterable, ast.Call)
        and isinstance(iterable.func, ast.Name)
        and iterable.func.id == "range"
        and iterable.args
    ):
        if len(iterable.args) == 1:
            return None, iterable.args[0]
        return iterable.args[0], iterable.args[1]
    return None, None


def _aliases(fn: FunctionNode, bound: ast.expr | None) -> set[str]:
    """The bound's text and, for a local, the texts of the first value it is given (``start =
    self.start_layer``): the loop starts (or ends) at either."""
    if bound is None:
        return set()
    out = {ast.unparse(bound)}
    if isinstance(bound, ast.Name):
        for stmt in walk_statements(fn.body):
            if (
                isinstance(stmt, ast.Assign)
                and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)
                and stmt.targets[0].id == bound.id
            ):
                out.add(ast.unparse(stmt.value))
                break
    return out


def _layer_bounds(fn: FunctionNode, bound_texts: set[str]) -> set[str]:
    """Values the forward uses as layer positions: assigned to a name the loop ranges over
    (``end = self.first_k``), or a bound of a slice of an attribute (``self.layers[k:]``). A layer
    position is never negative."""
    names = {t for t in bound_texts if t.isidentifier()}
    out: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in names for t in node.targets):
            value = node.value
            if not isinstance(value, ast.Constant):
                out.add(ast.unparse(value))
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.slice, ast.Slice)
            and isinstance(node.value, ast.Attribute)
        ):
            out.update(
                ast.unparse(b)
                for b in (node.slice.lower, node.slice.upper)
                if b is not None and not isinstance(b, ast.Constant)
            )
    return out - names


__all__ = ["FirstIndex"]

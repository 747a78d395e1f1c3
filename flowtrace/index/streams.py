"""Stream semantics at a capture site's first iteration: does recording raise there?

Split-residual engines start the layer loop with ``residual = None`` on the first pipeline
rank; the first layer sets it. A site that records ``hidden_states + residual`` *before* the
layer call therefore evaluates ``tensor + None`` at the loop's first index and raises a
TypeError, unless the expression (or an enclosing ``if``) tests that operand first
(``h if residual is None else h + residual``). This is decided per site by following the
value: which names may be ``None`` when the loop is entered, whether the loop rebinds them
unconditionally before the site, and whether the recorded expression combines them with an
operator outside a test of that name. Names are never matched: any operand is followed.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from flowtrace.index.syntax import body_statements, child_nodes, names_in, walk_statements

_OPERATORS = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide, cst.MatrixMultiply)


@dataclass(frozen=True, slots=True)
class NoneAtEntry:
    """``name`` may be None when the loop starts; ``node`` is the statement that makes it so."""

    name: str
    node: cst.CSTNode


def _is_none(node: cst.BaseExpression | None) -> bool:
    return isinstance(node, cst.Name) and node.value == "None"


def _assigned_none(stmt: cst.CSTNode) -> list[str]:
    """Names a statement binds to the literal None (``r = None``, ``h, r = x, None``)."""
    if isinstance(stmt, cst.AnnAssign) and isinstance(stmt.target, cst.Name):
        return [stmt.target.value] if _is_none(stmt.value) else []
    if not isinstance(stmt, cst.Assign):
        return []
    out: list[str] = []
    for target in stmt.targets:
        t, v = target.target, stmt.value
        if isinstance(t, cst.Name) and _is_none(v):
            out.append(t.value)
        elif isinstance(t, (cst.Tuple, cst.List)) and isinstance(v, (cst.Tuple, cst.List)) and len(t.elements) == len(v.elements):
            out += [te.value.value for te, ve in zip(t.elements, v.elements) if isinstance(te.value, cst.Name) and _is_none(ve.value)]
    return out


def none_at_entry(fn: cst.FunctionDef, loop: cst.For, statements: list, positions) -> dict[str, NoneAtEntry]:
    """Names that may hold None when ``loop`` is entered: bound to None by some statement
    before it (any branch), or a parameter defaulting to None that nothing before the loop
    rebinds."""
    start = positions[loop].start
    before = [s for s in statements if (positions[s].start.line, positions[s].start.column) < (start.line, start.column)]
    found: dict[str, NoneAtEntry] = {}
    for stmt in before:
        for name in _assigned_none(stmt):
            found.setdefault(name, NoneAtEntry(name, stmt))
    rebound = {n for s in before if isinstance(s, (cst.Assign, cst.AnnAssign)) for n in _bound_names(s)}
    for param in (*fn.params.params, *fn.params.kwonly_params):
        if _is_none(param.default) and param.name.value not in rebound:
            found.setdefault(param.name.value, NoneAtEntry(param.name.value, param))
    return found


def _bound_names(stmt: cst.CSTNode) -> set[str]:
    targets: list[cst.BaseExpression] = []
    if isinstance(stmt, cst.Assign):
        targets = [t.target for t in stmt.targets]
    elif isinstance(stmt, (cst.AnnAssign, cst.AugAssign)):
        targets = [stmt.target]
    out: set[str] = set()
    for t in targets:
        if isinstance(t, cst.Name):
            out.add(t.value)
        elif isinstance(t, (cst.Tuple, cst.List)):
            out |= {e.value.value for e in t.elements if isinstance(e.value, cst.Name)}
    return out


def binds(stmt: cst.CSTNode, name: str) -> bool:
    """``stmt`` binds ``name`` to a fresh object (``=``, a tuple target; not ``+=``)."""
    return isinstance(stmt, (cst.Assign, cst.AnnAssign)) and name in _bound_names(stmt)


def rebinds(loop: cst.For, name: str) -> bool:
    """The loop body binds ``name`` to a fresh object somewhere: a reference recorded in one
    iteration then stops following the name, so an in-place update later does not reach every
    recorded state alike."""
    return any(binds(s, name) for s in walk_statements(loop.body))


def rebound_unconditionally(loop: cst.For, before, positions) -> set[str]:
    """Names the loop body binds on every path before position ``before`` (top-level
    statements and ``with`` / ``try`` bodies; not inside an ``if``)."""
    out: set[str] = set()
    _rebound_into(body_statements(loop.body), before, positions, out)
    return out


def _rebound_into(statements: list, before, positions, out: set[str]) -> None:  # noqa: ANN001
    """:func:`rebound_unconditionally`'s recursion (module level: a nested recursive function
    would hold ``positions``, so the whole tree, in a reference cycle)."""
    for stmt in statements:
        start = positions[stmt].start
        if (start.line, start.column) >= (before.line, before.column):
            return
        if isinstance(stmt, (cst.With, cst.Try)):
            _rebound_into(body_statements(stmt.body), before, positions, out)
        else:
            out.update(_bound_names(stmt))


def unguarded_operand(expr: cst.CSTNode, names: set[str], bound: dict[str, cst.BaseExpression], depth: int = 0) -> str | None:
    """The first of ``names`` that ``expr`` combines with an arithmetic operator outside a
    test of that name; follows loop-local assignments (``x = h + r; aux.append(x)``)."""
    if depth > 6:
        return None
    if isinstance(expr, cst.IfExp):
        tested = names_in(expr.test) & names
        for branch in (expr.body, expr.orelse):
            hit = unguarded_operand(branch, names - tested, bound, depth + 1)
            if hit:
                return hit
        return None
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, _OPERATORS):
        for side in (expr.left, expr.right):
            if isinstance(side, cst.Name) and side.value in names:
                return side.value
    if isinstance(expr, cst.Name) and expr.value in bound:
        return unguarded_operand(bound[expr.value], names, {k: v for k, v in bound.items() if k != expr.value}, depth + 1)
    for child in child_nodes(expr):
        if isinstance(child, (cst.Lambda, cst.FunctionDef)):
            continue
        hit = unguarded_operand(child, names, bound, depth + 1)
        if hit:
            return hit
    return None


def tested_names(tests: tuple[cst.BaseExpression, ...]) -> set[str]:
    """Names an enclosing ``if`` compares with None (or tests for truth): a guard."""
    out: set[str] = set()
    for test in tests:
        for node in _comparisons(test):
            if isinstance(node, cst.Comparison) and any(isinstance(c.operator, (cst.Is, cst.IsNot)) for c in node.comparisons):
                out |= names_in(node)
    return out


def _comparisons(node: cst.CSTNode) -> list[cst.CSTNode]:
    out = [node]
    for child in child_nodes(node):
        out += _comparisons(child)
    return out


__all__ = ["NoneAtEntry", "none_at_entry", "rebound_unconditionally", "unguarded_operand", "tested_names"]

"""Stream semantics at a capture site's first iteration: does recording raise there?

Split-residual engines start the layer loop with ``residual = None`` on the first pipeline
rank; the first layer sets it. A site that records ``hidden_states + residual`` *before* the
layer call therefore evaluates ``tensor + None`` at the loop's first index and raises a
TypeError, unless the expression (or an enclosing ``if``) tests that operand first
(``h if residual is None else h + residual``). This is decided per site by following the
value: which names may be ``None`` when the loop is entered, whether the loop rebinds them
unconditionally before the site, and whether the recorded expression combines them with an
operator outside a test of that name. Names are never matched: any operand is followed.

The functions read stdlib ``ast`` nodes. Where the tree's shape decides a result (which
identifiers an expression spells, how deep the operand search goes), they count it as the
concrete syntax tree these facts were first computed on did, so the facts stay the same.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from flowtrace.index.syntax import (
    FunctionNode,
    Position,
    arguments,
    child_nodes,
    iter_nodes,
    parameters,
    start_of,
    walk_statements,
)

_OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.MatMult)
_MAX_DEPTH = 6
Loop = ast.For | ast.AsyncFor


@dataclass(frozen=True, slots=True)
class NoneAtEntry:
    """``name`` may be None when the loop starts; ``node`` is the statement (or the
    parameter's ``ast.arg``) that makes it so."""

    name: str
    node: ast.AST


def _is_none(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _unstarred(node: ast.expr) -> ast.expr:
    """``*x`` in a target or display is ``x`` (the grammar's starred element holds it)."""
    return node.value if isinstance(node, ast.Starred) else node


def _assigned_none(stmt: ast.AST) -> list[str]:
    """Names a statement binds to the literal None (``r = None``, ``h, r = x, None``)."""
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        return [stmt.target.id] if _is_none(stmt.value) else []
    if not isinstance(stmt, ast.Assign):
        return []
    out: list[str] = []
    v = stmt.value
    for t in stmt.targets:
        if isinstance(t, ast.Name) and _is_none(v):
            out.append(t.id)
        elif (
            isinstance(t, (ast.Tuple, ast.List)) and isinstance(v, (ast.Tuple, ast.List)) and len(t.elts) == len(v.elts)
        ):
            pairs = [(_unstarred(te), _unstarred(ve)) for te, ve in zip(t.elts, v.elts)]
            out += [te.id for te, ve in pairs if isinstance(te, ast.Name) and _is_none(ve)]
    return out


def none_at_entry(fn: FunctionNode, loop: Loop, statements: list[ast.stmt]) -> dict[str, NoneAtEntry]:
    """Names that may hold None when ``loop`` is entered: bound to None by some statement
    before it (any branch), or a parameter defaulting to None that nothing before the loop
    rebinds. ``statements`` are the function's (:func:`walk_statements`)."""
    start = start_of(loop)
    before = [s for s in statements if start_of(s) < start]
    found: dict[str, NoneAtEntry] = {}
    for stmt in before:
        for name in _assigned_none(stmt):
            found.setdefault(name, NoneAtEntry(name, stmt))
    rebound = {n for s in before if isinstance(s, (ast.Assign, ast.AnnAssign)) for n in _bound_names(s)}
    for param in parameters(fn, kwonly=True):
        if _is_none(param.default) and param.name not in rebound:
            found.setdefault(param.name, NoneAtEntry(param.name, param.node))
    return found


def _bound_names(stmt: ast.AST) -> set[str]:
    targets: list[ast.expr] = []
    if isinstance(stmt, ast.Assign):
        targets = stmt.targets
    elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        targets = [stmt.target]
    out: set[str] = set()
    for t in targets:
        if isinstance(t, ast.Name):
            out.add(t.id)
        elif isinstance(t, (ast.Tuple, ast.List)):
            out |= {e.id for e in map(_unstarred, t.elts) if isinstance(e, ast.Name)}
    return out


def binds(stmt: ast.AST, name: str) -> bool:
    """``stmt`` binds ``name`` to a fresh object (``=``, a tuple target; not ``+=``)."""
    return isinstance(stmt, (ast.Assign, ast.AnnAssign)) and name in _bound_names(stmt)


def rebinds(loop: Loop, name: str) -> bool:
    """The loop body binds ``name`` to a fresh object somewhere: a reference recorded in one
    iteration then stops following the name, so an in-place update later does not reach every
    recorded state alike."""
    return any(binds(s, name) for s in walk_statements(loop.body))


def rebound_unconditionally(loop: Loop, before: Position) -> set[str]:
    """Names the loop body binds on every path before position ``before`` (see
    :func:`~flowtrace.index.syntax.start_of`): top-level statements and ``with`` / ``try``
    bodies, not inside an ``if``."""
    out: set[str] = set()
    _rebound_into(loop.body, before, out)
    return out


def _rebound_into(statements: list[ast.stmt], before: Position, out: set[str]) -> None:
    """:func:`rebound_unconditionally`'s recursion (module level: a nested recursive function
    would be a reference cycle holding the tree)."""
    for stmt in statements:
        if start_of(stmt) >= before:
            return
        if isinstance(stmt, (ast.With, ast.AsyncWith, ast.Try)):
            _rebound_into(stmt.body, before, out)
        else:
            out.update(_bound_names(stmt))


# -- the recorded expression ---------------------------------------------------------
def unguarded_operand(expr: ast.AST, names: set[str], bound: dict[str, ast.expr], depth: int = 0) -> str | None:
    """The first of ``names`` that ``expr`` combines with an arithmetic operator outside a
    test of that name; follows loop-local assignments (``x = h + r; aux.append(x)``).
    ``depth`` counts levels as the concrete syntax tree nests them (:func:`_operand_children`)."""
    if depth > _MAX_DEPTH:
        return None
    if isinstance(expr, ast.IfExp):
        tested = spelled_names(expr.test) & names
        for branch in (expr.body, expr.orelse):
            hit = unguarded_operand(branch, names - tested, bound, depth + 1)
            if hit:
                return hit
        return None
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, _OPERATORS):
        for side in (expr.left, expr.right):
            if isinstance(side, ast.Name) and side.id in names:
                return side.id
    if isinstance(expr, ast.Name) and expr.id in bound:
        return _through(expr.id, names, bound, depth)
    for child, levels in _operand_children(expr):
        if isinstance(child, str):
            hit = (
                _through(child, names, bound, depth + levels)
                if child in bound and depth + levels <= _MAX_DEPTH
                else None
            )
        elif isinstance(child, ast.Lambda):
            continue
        else:
            hit = unguarded_operand(child, names, bound, depth + levels)
        if hit:
            return hit
    return None


def _through(name: str, names: set[str], bound: dict[str, ast.expr], depth: int) -> str | None:
    """Follow the loop-local ``name`` (read at ``depth``) to the value it was assigned."""
    return unguarded_operand(bound[name], names, {k: v for k, v in bound.items() if k != name}, depth + 1)


def _operand_children(expr: ast.AST) -> list[tuple[ast.AST | str, int]]:
    """``expr``'s children with how many levels below it the concrete syntax tree puts them
    (an argument, element or comparison target wraps its value; ``a and b and c`` nests), in
    its field order; an identifier that tree kept as a name node (an attribute's, a keyword's)
    comes as a string."""
    if isinstance(expr, ast.Call):
        return [(expr.func, 1), *((c, 2) for a in _call_args(expr) for c in a)]
    if isinstance(expr, ast.Attribute):
        return [(expr.value, 1), (expr.attr, 1)]
    if isinstance(expr, (ast.List, ast.Tuple, ast.Set)):
        return [(e, 1 if isinstance(e, ast.Starred) else 2) for e in expr.elts]
    if isinstance(expr, ast.Dict):
        return [(c, 2) for c in child_nodes(expr)]
    if isinstance(expr, ast.Compare):
        return [(expr.left, 1), *((c, 2) for c in expr.comparators)]
    if isinstance(expr, ast.BoolOp):
        n = len(expr.values)
        return [(v, n - max(i, 1)) for i, v in enumerate(expr.values)]
    if isinstance(expr, ast.Subscript):
        return [(expr.value, 1), *_slice_children(expr.slice)]
    if isinstance(expr, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
        head = [(expr.key, 1), (expr.value, 1)] if isinstance(expr, ast.DictComp) else [(expr.elt, 1)]
        return head + [pair for k, comp in enumerate(expr.generators) for pair in _comprehension_children(comp, k)]
    if isinstance(expr, ast.YieldFrom):
        return [(expr.value, 2)]
    if isinstance(expr, ast.FormattedValue):  # a format spec's parts sit right in the field
        return [
            (expr.value, 1),
            *((v, 1) for v in (expr.format_spec.values if isinstance(expr.format_spec, ast.JoinedStr) else ())),
        ]
    return [(c, 1) for c in child_nodes(expr)]


def _call_args(call: ast.Call) -> list[list[ast.AST | str]]:
    """Per argument (source order), what its wrapper holds: the value (a ``*x``'s ``x``),
    then a keyword's name."""
    return [[a.value, *([a.keyword] if a.keyword else [])] for a in arguments(call)]


def _slice_children(node: ast.expr) -> list[tuple[ast.AST, int]]:
    """A subscript's elements sit in an element, then an index (or a slice) node."""
    elements = node.elts if isinstance(node, ast.Tuple) and not _parenthesized(node) else [node]
    return [
        pair for e in elements for pair in ([(c, 3) for c in child_nodes(e)] if isinstance(e, ast.Slice) else [(e, 3)])
    ]


def _parenthesized(node: ast.Tuple) -> bool:
    """``x[(a, b)]`` (one index, a tuple) rather than ``x[a, b]`` (two elements)."""
    if not node.elts:
        return True
    first = node.elts[0]
    return (node.lineno, node.col_offset) != (first.lineno, first.col_offset)


def _comprehension_children(comp: ast.comprehension, k: int) -> list[tuple[ast.AST, int]]:
    """The ``k``-th ``for`` of a comprehension nests inside the ones before it; an ``if``
    wraps its test."""
    return [(comp.target, k + 2), (comp.iter, k + 2), *((test, k + 3) for test in comp.ifs)]


def tested_names(tests: tuple[ast.AST, ...]) -> set[str]:
    """Names an enclosing ``if`` compares with None (or tests for truth): a guard."""
    out: set[str] = set()
    for test in tests:
        for node in iter_nodes(test):
            if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
                out |= spelled_names(node)
    return out


def spelled_names(node: ast.AST) -> set[str]:
    """Every identifier ``node`` spells as a name: plain names, and (as the concrete syntax
    tree has name nodes for them) attribute and keyword names, lambda parameters and
    ``None`` / ``True`` / ``False``. ``self.residual is None`` spells ``residual``."""
    out: set[str] = set()
    for n in iter_nodes(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
        elif isinstance(n, ast.keyword) and n.arg is not None:
            out.add(n.arg)
        elif isinstance(n, ast.arg):
            out.add(n.arg)
        elif isinstance(n, ast.Constant) and (n.value is None or n.value is True or n.value is False):
            out.add(str(n.value))
    return out


__all__ = [
    "NoneAtEntry",
    "binds",
    "none_at_entry",
    "rebinds",
    "rebound_unconditionally",
    "spelled_names",
    "tested_names",
    "unguarded_operand",
]

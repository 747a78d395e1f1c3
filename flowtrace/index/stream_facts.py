"""Stream and return-path facts the rules need (links 5 and 6 of the capture chain), minimal.

Three shapes, each read from one function's own syntax (its node in the file's one stdlib
tree):

* ``folds_residual``: a layer forward that adds the residual itself and returns the full
  stream first (``h = residual + h``, ``h += residual``, ``h.add_(residual)``, a contraction
  such as ``torch.einsum(..., torch.stack([h, residual]))``; then ``return h, residual``), or a
  layer loop that rebuilds the stream from its layers' outputs the same way: capturing that
  first output is right;
* ``self_calls``: the methods a method of a class with a layer loop calls on ``self``, so a
  rule can tell which forward paths a speculative entry point reaches;
* ``early_return``: a ``return`` after the layer loop that hands back no aux container,
  ahead of the return that does, under a test that is neither a pipeline guard nor an
  emptiness test of the container: the captured states are dropped on that path.

A None operand at the first index is decided by :mod:`flowtrace.index.streams` (core) on the
capture site itself; these two shapes are what that module does not cover yet.
"""

from __future__ import annotations

import ast

from flowtrace.index.returns import nodes  # ast.walk's nodes and order, less the contexts
from flowtrace.model import facts as F

FOLDS_RESIDUAL = F.StreamFactKind.FOLDS_RESIDUAL
EARLY_RETURN = F.StreamFactKind.EARLY_RETURN
SELF_CALLS = F.StreamFactKind.SELF_CALLS  # detail: the methods this one calls on self, comma-separated


_Function = ast.FunctionDef | ast.AsyncFunctionDef


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in nodes(node) if isinstance(n, ast.Name)}


def _parents(fn: ast.AST) -> dict[ast.AST, ast.AST]:
    """The parent of every statement (and ``except`` clause, ``case``) below ``fn``, nested
    definitions' included: what a return's ancestors are. Statements stand only in these
    lists, so no expression is visited (most of a function's nodes)."""
    out: dict[ast.AST, ast.AST] = {}
    stack = [fn]
    while stack:
        parent = stack.pop()
        for field in _STATEMENT_LISTS:
            children = getattr(parent, field, None)
            if children.__class__ is list:
                for child in children:
                    out[child] = parent
                    stack.append(child)
    return out


_STATEMENT_LISTS = ("body", "orelse", "finalbody", "handlers", "cases")  # an IfExp's or a lambda's are not lists


def _tests_above(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> list[ast.expr]:
    tests = []
    while node in parents:
        parent = parents[node]
        if isinstance(parent, (ast.If, ast.IfExp, ast.While)):
            tests.append(parent.test)
        node = parent
    return tests


# Calls that fold their operands into one tensor: an addition, or a contraction (a weighted sum
# of streams, hyper-connection style) whose operands include the residual.
_FOLDING_CALLS = frozenset(
    {"add", "add_", "sum", "einsum", "matmul", "bmm", "mm", "tensordot", "addmm", "baddbmm", "addcmul", "lerp"}
)


def _folds(expr: ast.AST, residual: str) -> bool:
    """``expr`` adds ``residual`` in: a sum with it, or a folding call over it (``torch.add(h,
    residual)``, ``torch.einsum(..., torch.stack([h, residual]))``, ``(w * streams).sum(-1)``)."""
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        return residual in _names(expr)
    if isinstance(expr, ast.Call):
        func = expr.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name in _FOLDING_CALLS:
            operands = [*expr.args, *(k.value for k in expr.keywords)]
            if isinstance(func, ast.Attribute):
                operands.append(func.value)
            return any(residual in _names(o) for o in operands)
    return False


def _bound_by_fold(fn: ast.AST, name: str, residual: str, before: int) -> bool:
    """The last statement before line ``before`` that binds or updates ``name`` folds ``residual``
    into it (``h = h + residual``, ``h += residual``, ``h.add_(residual)``, a contraction)."""
    last: ast.stmt | None = None
    for stmt in nodes(fn):
        line = getattr(stmt, "lineno", 0)
        if line >= before or not isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr)):
            continue
        if _binds(stmt, name) and (last is None or line >= last.lineno):
            last = stmt
    if isinstance(last, ast.AugAssign):
        return isinstance(last.op, ast.Add) and residual in _names(last.value)
    if isinstance(last, ast.Expr):
        return _folds(last.value, residual)
    value = getattr(last, "value", None)
    return value is not None and _folds(value, residual)


def _binds(stmt: ast.stmt, name: str) -> bool:
    if isinstance(stmt, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets)
    if isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
        return isinstance(stmt.target, ast.Name) and stmt.target.id == name
    # an in-place update: ``name.add_(residual)``
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    return (
        isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr.endswith("_")
        and isinstance(call.func.value, ast.Name) and call.func.value.id == name
    )


def folds_residual(fn: _Function) -> int | None:
    """The line of ``return h, residual`` when the layer adds the residual to its first output
    itself: ``h`` last bound to (or updated by) a sum or a contraction with ``residual``, or the
    returned expression itself such a fold."""
    for ret in (n for n in nodes(fn) if isinstance(n, ast.Return)):
        value = ret.value
        if not isinstance(value, ast.Tuple) or len(value.elts) != 2 or not isinstance(value.elts[1], ast.Name):
            continue
        first, residual = value.elts[0], value.elts[1].id
        if "residual" not in residual:
            continue
        if _folds(first, residual) or (
            isinstance(first, ast.Name) and _bound_by_fold(fn, first.id, residual, ret.lineno)
        ):
            return ret.lineno
    return None


def rebuilds_stream(fn: _Function) -> int | None:
    """The line where a layer loop rebuilds the stream from its layers' outputs: after a call
    that returns ``(h, residual)``, ``h`` is rebound in the same loop body to a fold of the
    residual (a sum or a contraction), so what the loop records of ``h`` is the full stream."""
    for loop in (n for n in nodes(fn) if isinstance(n, (ast.For, ast.AsyncFor))):
        unpacked: dict[str, str] = {}
        for stmt in loop.body:
            if (
                isinstance(stmt, ast.Assign)
                and isinstance(stmt.targets[0], ast.Tuple)
                and isinstance(stmt.value, ast.Call)
            ):
                names = [e.id for e in stmt.targets[0].elts if isinstance(e, ast.Name)]
                if len(names) == 2 and "residual" in names[1]:
                    unpacked[names[0]] = names[1]
            elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                name = stmt.targets[0].id
                if name in unpacked and _folds(stmt.value, unpacked[name]):
                    return stmt.lineno
    return None


def _values(ret: ast.Return) -> int:
    """How many values a return hands back: a tuple's length, 1 for one expression, 0 for none
    (or a starred tuple, whose length is not known)."""
    if ret.value is None:
        return 0
    if isinstance(ret.value, ast.Tuple):
        return 0 if any(isinstance(e, ast.Starred) for e in ret.value.elts) else len(ret.value.elts)
    return 1


def early_returns(
    fn: _Function, containers: set[str], first_capture: int, guards: tuple[str, ...]
) -> list[tuple[int, str, int]]:
    """(line, guarding test, values handed back) of returns after the first capture that drop
    the containers ahead of the return that hands them back."""
    returns = [n for n in nodes(fn) if isinstance(n, ast.Return) and n.lineno > first_capture]
    handing = [r.lineno for r in returns if r.value is not None and _names(r.value) & containers]
    if not handing:
        return []
    parents = _parents(fn)
    out = []
    for ret in returns:
        if ret.lineno >= max(handing) or (ret.value is not None and _names(ret.value) & containers):
            continue
        tests = _tests_above(ret, parents)
        if _after_emptiness_test(ret, parents, containers):
            continue  # `if aux: return h, aux` then `return h`: the empty case
        if not tests:
            continue  # an unconditional return ends the function: the aux return is dead code, not a path
        text = " and ".join(ast.unparse(t) for t in tests)
        if any(_names(t) & containers for t in tests) or any(g in text for g in guards):
            continue
        out.append((ret.lineno, text, _values(ret)))
    return out


def _after_emptiness_test(ret: ast.Return, parents: dict[ast.AST, ast.AST], containers: set[str]) -> bool:
    parent = parents.get(ret)
    body = getattr(parent, "body", None)
    if not isinstance(body, list) or ret not in body:
        return False
    index = body.index(ret)
    previous = body[index - 1] if index else None
    return isinstance(previous, ast.If) and bool(_names(previous.test) & containers)


def function_facts(
    path: str,
    class_qualname: str,
    function: str,
    fn: _Function,
    sites: list[F.CaptureSiteFact],
    guards: tuple[str, ...],
) -> list[F.StreamFact]:
    """Stream facts of one method; ``sites`` are the capture sites the loop pass found in it."""
    out: list[F.StreamFact] = []
    if function.endswith(".forward"):
        line = folds_residual(fn)
        if line is not None:
            out.append(
                F.StreamFact(
                    class_qualname,
                    function,
                    F.Location(path, line),
                    FOLDS_RESIDUAL,
                    "returns the stream with the residual added",
                )
            )
        rebuilt = rebuilds_stream(fn)
        if rebuilt is not None:
            out.append(
                F.StreamFact(
                    class_qualname,
                    function,
                    F.Location(path, rebuilt),
                    FOLDS_RESIDUAL,
                    "rebuilds the stream from its layers' outputs",
                )
            )
    if not sites:
        return out
    loops = [n for n in nodes(fn) if isinstance(n, ast.For)]
    containers = {s.container for s in sites if s.container}
    if loops:
        first_capture = min(site.location.line for site in sites)
        for line, test, values in early_returns(fn, containers, first_capture, guards):
            out.append(F.StreamFact(class_qualname, function, F.Location(path, line), EARLY_RETURN, test, values))
    return out


def self_calls(path: str, class_qualname: str, function: str, fn: _Function) -> F.StreamFact | None:
    """The methods a method calls on ``self`` (``self.m(...)``): what a speculative entry point reaches."""
    names = sorted(
        {
            n.func.attr
            for n in nodes(fn)
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name)
            and n.func.value.id == "self"
        }
    )
    return (
        F.StreamFact(class_qualname, function, F.Location(path, fn.lineno), SELF_CALLS, ",".join(names))
        if names
        else None
    )

"""Stream and return-path facts the rules need (links 5 and 6 of the capture chain), minimal.

Three shapes, each read from one function's own syntax (its node in the file's one stdlib
tree):

* ``folds_residual``: a layer forward that adds the residual itself and returns the full
  stream first (``h = residual + h; return h, residual``): capturing its first output is right;
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

from flowtrace.model import facts as F

FOLDS_RESIDUAL = F.StreamFactKind.FOLDS_RESIDUAL
EARLY_RETURN = F.StreamFactKind.EARLY_RETURN
SELF_CALLS = F.StreamFactKind.SELF_CALLS  # detail: the methods this one calls on self, comma-separated


_Function = ast.FunctionDef | ast.AsyncFunctionDef


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _parents(fn: ast.AST) -> dict[ast.AST, ast.AST]:
    out: dict[ast.AST, ast.AST] = {}
    for parent in ast.walk(fn):
        for child in ast.iter_child_nodes(parent):
            out[child] = parent
    return out


def _tests_above(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> list[ast.expr]:
    tests = []
    while node in parents:
        parent = parents[node]
        if isinstance(parent, (ast.If, ast.IfExp, ast.While)):
            tests.append(parent.test)
        node = parent
    return tests


def _is_add_of(expr: ast.AST, name: str) -> bool:
    return isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add) and name in _names(expr)


def folds_residual(fn: _Function) -> int | None:
    """The line of ``return h, residual`` when ``h`` was last bound to a sum with ``residual``."""
    last: dict[str, ast.AST] = {}
    for stmt in ast.walk(fn):
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            name = stmt.targets[0].id
            if name not in last or stmt.lineno >= last[name].lineno:  # type: ignore[attr-defined]
                last[name] = stmt
    for ret in (n for n in ast.walk(fn) if isinstance(n, ast.Return)):
        value = ret.value
        if not isinstance(value, ast.Tuple) or len(value.elts) != 2 or not all(isinstance(e, ast.Name) for e in value.elts):
            continue
        first, second = value.elts[0].id, value.elts[1].id  # type: ignore[attr-defined]
        bound = last.get(first)
        if "residual" in second and isinstance(bound, ast.Assign) and bound.lineno < ret.lineno and _is_add_of(bound.value, second):
            return ret.lineno
    return None


def _values(ret: ast.Return) -> int:
    """How many values a return hands back: a tuple's length, 1 for one expression, 0 for none
    (or a starred tuple, whose length is not known)."""
    if ret.value is None:
        return 0
    if isinstance(ret.value, ast.Tuple):
        return 0 if any(isinstance(e, ast.Starred) for e in ret.value.elts) else len(ret.value.elts)
    return 1


def early_returns(fn: _Function, containers: set[str], first_capture: int, guards: tuple[str, ...]) -> list[tuple[int, str, int]]:
    """(line, guarding test, values handed back) of returns after the first capture that drop
    the containers ahead of the return that hands them back."""
    returns = [n for n in ast.walk(fn) if isinstance(n, ast.Return) and n.lineno > first_capture]
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


def function_facts(path: str, class_qualname: str, function: str, fn: _Function, sites: list[F.CaptureSiteFact], guards: tuple[str, ...]) -> list[F.StreamFact]:
    """Stream facts of one method; ``sites`` are the capture sites the loop pass found in it."""
    out: list[F.StreamFact] = []
    if function.endswith(".forward"):
        line = folds_residual(fn)
        if line is not None:
            out.append(F.StreamFact(class_qualname, function, F.Location(path, line), FOLDS_RESIDUAL, "returns the stream with the residual added"))
    if not sites:
        return out
    loops = [n for n in ast.walk(fn) if isinstance(n, ast.For)]
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
            for n in ast.walk(fn)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name) and n.func.value.id == "self"
        }
    )
    return F.StreamFact(class_qualname, function, F.Location(path, fn.lineno), SELF_CALLS, ",".join(names)) if names else None

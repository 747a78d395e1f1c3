"""Marks a setter sets on the layers it picks (``setattr(self.layers[i], "<mark>", True)``).

Some models let each decoder layer carry a flag the forward reads back
(``captured=aux if getattr(layer, "<mark>", False) else None``) instead of testing the ids
in the loop. The setter then turns the flag on for every id it is handed. When it never
turns it off for the others, a second call with other ids leaves the first call's layers
marked: the forward records the union (a serving-path defect: a server that re-applies
ids, say for another draft, feeds the new draft extra states). Read with the
stdlib ``ast`` from the setter's own body and its class's other methods; no evaluation.
"""

from __future__ import annotations

import ast

from flowtrace.index.context import ClassInfo, FileContext
from flowtrace.index.syntax import FunctionNode
from flowtrace.model import facts as F


def _layer_subscript(node: ast.expr, variable: str) -> str | None:
    """``self.<x>[<variable>]`` (or ``self.<x>.<y>[<variable>]``) -> ``self.<x>``'s source path."""
    if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Name) and node.slice.id == variable):
        return None
    base = node.value
    parts: list[str] = []
    while isinstance(base, ast.Attribute):
        parts.append(base.attr)
        base = base.value
    if isinstance(base, ast.Name) and base.id == "self" and parts:
        return ".".join(["self", *reversed(parts)])
    return None


def _set_mark(stmt: ast.stmt) -> tuple[ast.expr, str, ast.expr] | None:
    """(object, mark, value) of ``setattr(obj, "<mark>", v)`` or ``obj.<mark> = v``."""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        call = stmt.value
        if isinstance(call.func, ast.Name) and call.func.id == "setattr" and len(call.args) == 3:
            obj, name, value = call.args
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                return obj, name.value, value
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Attribute):
        return stmt.targets[0].value, stmt.targets[0].attr, stmt.value
    return None


def _is_true(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def _marks_set(fn: FunctionNode) -> list[tuple[str, str, int]]:
    """(mark, layer container, line) for each ``for v in ...: <set self.<x>[v].<mark> = True>``."""
    out = []
    for loop in (n for n in ast.walk(fn) if isinstance(n, (ast.For, ast.AsyncFor))):
        if not isinstance(loop.target, ast.Name):
            continue
        variable = loop.target.id
        for stmt in (s for s in ast.walk(loop) if isinstance(s, ast.stmt)):
            found = _set_mark(stmt)
            if found is not None and _is_true(found[2]):
                container = _layer_subscript(found[0], variable)
                if container is not None:
                    out.append((found[1], container, stmt.lineno))
    return out


def _clears(fn: FunctionNode, mark: str) -> bool:
    """The setter also writes ``mark`` with something other than True (``False``, ``i in ids``)
    or deletes it: the marks of a previous call do not survive."""
    for stmt in (s for s in ast.walk(fn) if isinstance(s, ast.stmt)):
        found = _set_mark(stmt)
        if found is not None and found[1] == mark and not _is_true(found[2]):
            return True
        if (
            isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Name)
            and stmt.value.func.id == "delattr"
        ):
            args = stmt.value.args
            if len(args) == 2 and isinstance(args[1], ast.Constant) and args[1].value == mark:
                return True
    return False


def _reads(info: ClassInfo, setter: FunctionNode, mark: str) -> ast.AST | None:
    """The first read of ``mark`` in another method of the class (``getattr(layer, "<mark>"``
    or ``layer.<mark>``): the forward that decides by it."""
    for name, fn in info.methods.items():
        if fn is setter or name == setter.name:
            continue
        for node in ast.walk(fn):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")
                and len(node.args) >= 2
            ):
                if isinstance(node.args[1], ast.Constant) and node.args[1].value == mark:
                    return node
            if isinstance(node, ast.Attribute) and node.attr == mark and isinstance(node.ctx, ast.Load):
                return node
    return None


def layer_marks(file: FileContext, info: ClassInfo, fn: FunctionNode) -> tuple[F.LayerMarkFact, ...]:
    """The marks ``fn`` (a setter of ``info``) sets on the layers it is handed ids for."""
    out: list[F.LayerMarkFact] = []
    seen: set[str] = set()
    for mark, container, line in _marks_set(fn):
        if mark in seen:
            continue
        seen.add(mark)
        read = _reads(info, fn, mark)
        out.append(
            F.LayerMarkFact(
                mark,
                container,
                F.Location(file.path, line),
                _clears(fn, mark),
                file.loc(read) if read is not None else None,
            )
        )
    return tuple(out)


__all__ = ["layer_marks"]

"""Capture helpers found by shape, whatever they are called.

A helper is a method handed the collector and a label that records a state when the label
is in a capture attribute::

    def _keep(self, aux, label, h, r):
        if label in self.layers_to_capture:
            aux.append(h + r)

Profiles may name helpers (a hint that also fixes the label's position); any method of
this shape is recognised too, so an engine's renamed helper is not invisible. A loop's call
``self.<m>(aux, i + 1, h, r)`` becomes a capture site that resolution confirms against the
holder's methods (the helper may live on a mixin in another file).
"""

from __future__ import annotations

import ast

from flowtrace.index.context import ClassInfo, FileContext
from flowtrace.model import facts as F
from flowtrace.index.streams import tested_names
from flowtrace.index.syntax import (
    FunctionNode,
    arguments,
    iter_nodes,
    last_name,
    names_in,
    parameter_names,
    walk_statements,
)


def _membership(test: ast.expr, params: list[str], attributes: set[str]) -> tuple[str, str] | None:
    """(label parameter, attribute) for ``<param> in self.<attr>``."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.In)):
        return None
    left, right = test.left, test.comparators[0]
    if (
        isinstance(left, ast.Name)
        and left.id in params
        and isinstance(right, ast.Attribute)
        and right.attr in attributes
    ):
        return left.id, right.attr
    return None


def helper_definition(file: FileContext, info: ClassInfo, fn: FunctionNode) -> F.HelperDefFact | None:
    params = parameter_names(fn)[1:]  # self excluded, as at the call
    if len(params) < 2:
        return None
    methods = set(file.conv.container_methods)
    for stmt in walk_statements(fn.body):
        if not isinstance(stmt, ast.If):
            continue
        found = _membership(stmt.test, params, set(file.conv.attributes))
        if found is None:
            continue
        label, attribute = found
        recorded = _recording(stmt.body, params, methods)
        if recorded is None:
            continue
        container, value, locals_ = recorded
        guarded = bool(tested_names((value,)) & set(params)) or any(
            isinstance(n, ast.IfExp) for n in _walk(value, locals_)
        )
        shown = locals_.get(value.id, value) if isinstance(value, ast.Name) else value
        slot = params.index(container) if container in params else SELF_CONTAINER
        return F.HelperDefFact(
            info.qualname, fn.name, params.index(label), slot, attribute, file.loc(fn), guarded, file.code(shown)
        )
    return None


SELF_CONTAINER = -1  # HelperDefFact.container_arg of a recorder that appends to an attribute of its own object


def _container(func: ast.Attribute, params: list[str]) -> str | None:
    """The collector of ``<c>.append(x)``: a parameter, or ``self.<attr>`` (a metadata object
    that keeps the states it records)."""
    owner = func.value
    if isinstance(owner, ast.Name) and owner.id in params:
        return owner.id
    if isinstance(owner, ast.Attribute) and isinstance(owner.value, ast.Name) and owner.value.id == "self":
        return f"self.{owner.attr}"
    return None


def _recording(
    statements: list[ast.stmt], params: list[str], methods: set[str]
) -> tuple[str, ast.expr, dict[str, ast.expr]] | None:
    """(container, recorded value, locals) of ``<param>.append(x)`` / ``self.<attr>.append(x)`` in a block."""
    locals_: dict[str, ast.expr] = {}
    for stmt in statements:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            locals_[stmt.targets[0].id] = stmt.value
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            call = stmt.value
            func = call.func
            container = _container(func, params) if isinstance(func, ast.Attribute) else None
            args = arguments(call)
            if container is not None and last_name(func) in methods and args:
                return container, args[0].value, locals_
    return None


def _walk(value: ast.expr, locals_: dict[str, ast.expr]) -> list[ast.AST]:
    """The value's nodes, with one level of locals followed (``v = h + r if r else h``)."""
    out = list(iter_nodes(value))
    for name in names_in(value):
        if name in locals_:
            out += list(iter_nodes(locals_[name]))
    return out


__all__ = ["helper_definition"]

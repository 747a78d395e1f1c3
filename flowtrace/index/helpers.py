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

from typing import TYPE_CHECKING

import libcst as cst

from flowtrace.model import facts as F
from flowtrace.index.streams import tested_names
from flowtrace.index.syntax import body_statements, last_name, names_in, walk_statements

if TYPE_CHECKING:
    from flowtrace.index.visitors import FileAnalyzer, _Class


def _membership(test: cst.BaseExpression, params: list[str], attributes: set[str]) -> tuple[str, str] | None:
    """(label parameter, attribute) for ``<param> in self.<attr>``."""
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and isinstance(test.comparisons[0].operator, cst.In)):
        return None
    left, right = test.left, test.comparisons[0].comparator
    if isinstance(left, cst.Name) and left.value in params and isinstance(right, cst.Attribute) and right.attr.value in attributes:
        return left.value, right.attr.value
    return None


def helper_definition(file: FileAnalyzer, info: _Class, fn: cst.FunctionDef) -> F.HelperDefFact | None:
    params = [p.name.value for p in fn.params.params][1:]  # self excluded, as at the call
    if len(params) < 2:
        return None
    methods = set(file.conv.container_methods)
    for stmt in walk_statements(fn.body):
        if not isinstance(stmt, cst.If):
            continue
        found = _membership(stmt.test, params, set(file.conv.attributes))
        if found is None:
            continue
        label, attribute = found
        recorded = _recording(body_statements(stmt.body), params, methods)
        if recorded is None:
            continue
        container, value, locals_ = recorded
        guarded = bool(tested_names((value,)) & set(params)) or any(isinstance(n, cst.IfExp) for n in _walk(value, locals_))
        shown = locals_.get(value.value, value) if isinstance(value, cst.Name) else value
        slot = params.index(container) if container in params else SELF_CONTAINER
        return F.HelperDefFact(info.qualname, fn.name.value, params.index(label), slot, attribute, file.loc(fn), guarded, file.code(shown))
    return None


SELF_CONTAINER = -1  # HelperDefFact.container_arg of a recorder that appends to an attribute of its own object


def _container(func: cst.Attribute, params: list[str]) -> str | None:
    """The collector of ``<c>.append(x)``: a parameter, or ``self.<attr>`` (a metadata object
    that keeps the states it records)."""
    owner = func.value
    if isinstance(owner, cst.Name) and owner.value in params:
        return owner.value
    if isinstance(owner, cst.Attribute) and isinstance(owner.value, cst.Name) and owner.value.value == "self":
        return f"self.{owner.attr.value}"
    return None


def _recording(statements: list, params: list[str], methods: set[str]):
    """(container, recorded value, locals) of ``<param>.append(x)`` / ``self.<attr>.append(x)`` in a block."""
    locals_: dict[str, cst.BaseExpression] = {}
    for stmt in statements:
        if isinstance(stmt, cst.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0].target, cst.Name):
            locals_[stmt.targets[0].target.value] = stmt.value
        if isinstance(stmt, cst.Expr) and isinstance(stmt.value, cst.Call):
            call = stmt.value
            func = call.func
            container = _container(func, params) if isinstance(func, cst.Attribute) else None
            if container is not None and last_name(func) in methods and call.args:
                return container, call.args[0].value, locals_
    return None


def _walk(value: cst.BaseExpression, locals_: dict[str, cst.BaseExpression]) -> list[cst.CSTNode]:
    """The value's nodes, with one level of locals followed (``v = h + r if r else h``)."""
    from flowtrace.index.syntax import iter_nodes

    out = list(iter_nodes(value))
    for name in names_in(value):
        if name in locals_:
            out += list(iter_nodes(locals_[name]))
    return out


__all__ = ["helper_definition"]

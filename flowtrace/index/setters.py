"""Read a layer-capture setter: its arms, default, id transform, delegation and PP guard.

A setter maps the draft's config ids to capture indices. Engines write that mapping in many
shapes (``[v + 1 for v in ids]``, ``list(ids)``, "add one only if the first id is 1",
handing the ids to another object's setter); this module names the shape without
evaluating anything. Concrete values come later, from :mod:`flowtrace.analysis.layer_ids`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from flowtrace.model import facts as F
from flowtrace.index.syntax import body_statements, canonical, last_name, names_in

if TYPE_CHECKING:
    from flowtrace.index.visitors import FileAnalyzer, _Class

_WRAPPERS = {"list": None, "tuple": None, "sorted": "sorted", "set": "deduplicated"}


@dataclass(frozen=True, slots=True)
class _Arm:
    conditions: tuple[str, ...]
    target: str
    expression: cst.BaseExpression
    text: str
    line: int
    delegation: bool


class SetterAnalyzer:
    def __init__(self, file: FileAnalyzer, info: _Class, fn: cst.FunctionDef) -> None:
        self.file = file
        self.info = info
        self.fn = fn
        params = [p for p in fn.params.params if p.name.value not in {"self", "cls"}]
        self.param = params[0].name.value if params else None
        self.locals: dict[str, cst.BaseExpression] = {}
        self.arms: list[_Arm] = []
        self.pp_guard = False
        self.param_default: str | None = None

    # -- walking -------------------------------------------------------------
    def fact(self) -> F.SetterFact:
        self.walk(body_statements(self.fn.body), ())
        explicit = [a for a in self.arms if self.uses_param(a.expression)]
        defaults = [a for a in self.arms if not a.delegation and not self.uses_param(a.expression) and self.is_id_list(a.expression)]
        defaults += [a for a in self.arms if a.delegation and not self.uses_param(a.expression)]
        transform, note = self.overall(explicit)
        delegations = [a for a in explicit if a.delegation] or [a for a in self.arms if a.delegation]
        delegate = delegate_method = None
        if delegations:
            target = delegations[0].target.removesuffix("()")
            delegate, _, delegate_method = target.rpartition(".")
        writes = tuple(dict.fromkeys(a.target for a in self.arms if not a.delegation))
        branches = tuple(
            F.SetterBranch(
                " and ".join(a.conditions) or None, a.target, a.text, self.transform_of(a.expression)[0] if self.uses_param(a.expression) else "default", a.line
            )
            for a in self.arms
        )
        return F.SetterFact(
            class_qualname=self.info.qualname,
            method=self.fn.name.value,
            location=self.file.loc(self.fn),
            parameter=self.param,
            id_transform=transform,
            transform_note=note,
            default_layers=canonical(defaults[0].text) if defaults else (canonical(self.param_default) if self.param_default else None),
            writes=writes,
            delegate=delegate or None,
            delegate_method=delegate_method,
            pp_guard=self.pp_guard,
            branches=branches,
            source=self.file.code(self.fn),
        )

    def walk(self, statements: list, conditions: tuple[str, ...]) -> None:
        for stmt in statements:
            if isinstance(stmt, cst.If):
                self.walk_if(stmt, conditions)
            elif isinstance(stmt, cst.Assign):
                self.assignment(stmt, conditions)
            elif isinstance(stmt, cst.AnnAssign) and stmt.value is not None:
                self.assignment(cst.Assign([cst.AssignTarget(stmt.target)], stmt.value), conditions, node=stmt)
            elif isinstance(stmt, cst.Expr) and isinstance(stmt.value, cst.Call):
                self.call(stmt.value, conditions)
            elif isinstance(stmt, (cst.For, cst.While, cst.With, cst.Try)):
                self.walk(body_statements(stmt.body), conditions)

    def walk_if(self, stmt: cst.If, conditions: tuple[str, ...]) -> None:
        test = self.file.code(stmt.test)
        inner = body_statements(stmt.body)
        if any(g in test for g in self.file.conv.pp_guards) and inner and all(isinstance(s, (cst.Return, cst.Raise)) for s in inner):
            self.pp_guard = True
            return
        self.walk(inner, conditions + (test,))
        orelse = stmt.orelse
        if isinstance(orelse, cst.If):
            self.walk_if(orelse, conditions + (f"not ({test})",))
        elif isinstance(orelse, cst.Else):
            self.walk(body_statements(orelse.body), conditions + (f"not ({test})",))

    def assignment(self, stmt: cst.Assign, conditions: tuple[str, ...], node: cst.CSTNode | None = None) -> None:
        for target in stmt.targets:
            if isinstance(target.target, cst.Name):
                if target.target.value == self.param:
                    # `if layer_ids is None: layer_ids = [...]`: a default given by rebinding.
                    if self.param_default is None and not self.uses_param(stmt.value):
                        self.param_default = self.file.code(stmt.value)
                    continue
                if (
                    self.param_default is None
                    and not self.uses_param(stmt.value)
                    and any(c.replace(" ", "") == f"{self.param}isNone" for c in conditions)
                    and isinstance(stmt.value, (cst.List, cst.Tuple))
                ):
                    # `if ids is None: layers = [2, n // 2, n - 3]` then handed on: the default
                    self.param_default = self.file.code(stmt.value)
                self.locals[target.target.value] = stmt.value
                continue
            name = last_name(target.target)
            if name in self.file.conv.attributes or (
                isinstance(target.target, cst.Attribute) and self.uses_param(stmt.value) and name not in self.file.conv.flags
            ):
                self.arms.append(
                    _Arm(conditions, self.file.code(target.target), stmt.value, self.file.code(stmt.value), self.file.line(node or stmt), False)
                )

    def call(self, call: cst.Call, conditions: tuple[str, ...]) -> None:
        name = last_name(call.func)
        if name in self.file.conv.setters and isinstance(call.func, cst.Attribute):
            arg = call.args[0].value if call.args else cst.Name("None")
            self.arms.append(
                _Arm(conditions, f"{self.file.code(call.func)}()", arg, self.file.code(arg), self.file.line(call), True)
            )

    # -- classification --------------------------------------------------------
    def uses_param(self, expr: cst.BaseExpression, depth: int = 0) -> bool:
        if self.param is None or depth > 8:
            return False
        mentioned = names_in(expr)
        if self.param in mentioned:
            return True
        return any(self.uses_param(self.locals[n], depth + 1) for n in mentioned if n in self.locals and n != self.param)

    def is_id_list(self, expr: cst.BaseExpression) -> bool:
        """A default arm assigns a list/tuple (or a local or call producing one), not a flag."""
        if isinstance(expr, cst.Name) and expr.value in self.locals:
            return self.is_id_list(self.locals[expr.value])
        return isinstance(expr, (cst.List, cst.Tuple, cst.ListComp, cst.Call, cst.BinaryOperation, cst.Subscript))

    def transform_of(self, expr: cst.BaseExpression, depth: int = 0) -> tuple[str, list[str]]:
        """(transform, notes) for an expression of the ids parameter."""
        if depth > 8:
            return F.OTHER, []
        if isinstance(expr, cst.Name):
            if expr.value == self.param:
                return F.IDENTITY, []
            if expr.value in self.locals:
                return self.transform_of(self.locals[expr.value], depth + 1)
            return F.OTHER, []
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value in _WRAPPERS and len(expr.args) == 1:
            inner, notes = self.transform_of(expr.args[0].value, depth + 1)
            extra = _WRAPPERS[expr.func.value]
            return inner, notes + ([extra] if extra else [])
        if isinstance(expr, (cst.ListComp, cst.GeneratorExp, cst.SetComp)) and isinstance(expr.for_in, cst.CompFor):
            comp = expr.for_in
            if comp.inner_for_in is not None or comp.ifs or not isinstance(comp.target, cst.Name):
                return F.OTHER, []
            source, notes = self.transform_of(comp.iter, depth + 1)
            if source != F.IDENTITY:
                return F.OTHER, notes
            var = comp.target.value
            element = expr.elt
            if isinstance(element, cst.Name) and element.value == var:
                return F.IDENTITY, notes
            offset = _offset(element, var)
            if offset == 1:
                return F.PLUS_ONE, notes
            if offset is not None:
                return F.OTHER, notes + [f"adds {offset}"]
            return F.OTHER, notes
        return F.OTHER, []

    def overall(self, explicit: list[_Arm]) -> tuple[str, str | None]:
        if not explicit:
            return (F.OTHER, "no assignment of the ids found") if self.param else (F.OTHER, "setter takes no ids")
        kinds = [(a, *self.transform_of(a.expression)) for a in explicit]
        distinct = sorted({k for _, k, _ in kinds})
        notes = sorted({n for _, _, ns in kinds for n in ns})
        note = ", ".join(notes) or None
        if len(distinct) == 1:
            transform = distinct[0]
            if transform == F.IDENTITY and all(a.delegation for a in explicit):
                return F.DELEGATES, note
            return transform, note
        # Several arms with different transforms: name the predicate that separates them.
        common = set(explicit[0].conditions)
        for a, *_ in kinds:
            common &= set(a.conditions)
        described = []
        for a, kind, _ in kinds:
            own = [c for c in a.conditions if c not in common and not c.startswith("not (")]
            if own:
                described.append(f"{kind} if {' and '.join(own)}")
        others = [kind for a, kind, _ in kinds if not [c for c in a.conditions if c not in common and not c.startswith("not (")]]
        text = "; ".join(described)
        if others:
            text += f"; else {others[0]}"
        return F.CONDITIONAL, text or None


def _offset(expr: cst.BaseExpression, var: str) -> int | None:
    """k for ``var + k`` / ``k + var`` / ``var - k``, else None."""
    if not isinstance(expr, cst.BinaryOperation):
        return None
    left, right = expr.left, expr.right
    if isinstance(expr.operator, cst.Add):
        if isinstance(left, cst.Name) and left.value == var and isinstance(right, cst.Integer):
            return int(right.value)
        if isinstance(right, cst.Name) and right.value == var and isinstance(left, cst.Integer):
            return int(left.value)
    if isinstance(expr.operator, cst.Subtract) and isinstance(left, cst.Name) and left.value == var and isinstance(right, cst.Integer):
        return -int(right.value)
    return None


__all__ = ["SetterAnalyzer"]

"""Read a layer-capture setter: its arms, default, id transform, delegation and PP guard.

A setter maps the draft's config ids to capture indices. Engines write that mapping in many
shapes (``[v + 1 for v in ids]``, ``list(ids)``, "add one only if the first id is 1",
handing the ids to another object's setter); this module names the shape without
evaluating anything. Concrete values come later, from :mod:`flowtrace.model.safe_eval` and
:mod:`flowtrace.analysis.function_interpreter`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from flowtrace.index.context import ClassInfo, FileContext
from flowtrace.index.layer_marks import layer_marks
from flowtrace.model import facts as F
from flowtrace.index.streams import spelled_names
from flowtrace.index.syntax import FunctionNode, arguments, canonical, int_value, last_name, parameters

_WRAPPERS = {"list": None, "tuple": None, "sorted": "sorted", "set": "deduplicated"}
# The blocks a setter's body is read through (their bodies only, as the setter runs them).
_LOOPS_AND_BLOCKS = (ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try)


@dataclass(frozen=True, slots=True)
class _Arm:
    conditions: tuple[str, ...]
    target: str
    expression: ast.expr
    text: str
    line: int
    delegation: bool


class SetterAnalyzer:
    def __init__(self, file: FileContext, info: ClassInfo, fn: FunctionNode) -> None:
        self.file = file
        self.info = info
        self.fn = fn
        params = [p for p in parameters(fn) if p.name not in {"self", "cls"}]
        self.param = params[0].name if params else None
        self.locals: dict[str, ast.expr] = {}
        self.arms: list[_Arm] = []
        self.pp_guard = False
        self.param_default: str | None = None
        self.switches: list[str] = []  # attributes set to True (a flag a forward may test)

    # -- walking -------------------------------------------------------------
    def fact(self) -> F.SetterFact:
        self.walk(self.fn.body, ())
        explicit = [a for a in self.arms if self.uses_param(a.expression)]
        defaults = [
            a
            for a in self.arms
            if not a.delegation and not self.uses_param(a.expression) and self.is_id_list(a.expression)
        ]
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
                " and ".join(a.conditions) or None,
                a.target,
                a.text,
                self.transform_of(a.expression)[0] if self.uses_param(a.expression) else F.DefaultArm.DEFAULT,
                a.line,
            )
            for a in self.arms
        )
        return F.SetterFact(
            class_qualname=self.info.qualname,
            method=self.fn.name,
            location=self.file.loc(self.fn),
            parameter=self.param,
            id_transform=transform,
            transform_note=note,
            default_layers=(
                canonical(defaults[0].text)
                if defaults
                else (canonical(self.param_default) if self.param_default else None)
            ),
            writes=writes,
            delegate=delegate or None,
            delegate_method=delegate_method,
            pp_guard=self.pp_guard,
            branches=branches,
            source=self.file.code(self.fn),
            marks=layer_marks(self.file, self.info, self.fn),
            switches=tuple(dict.fromkeys(self.switches)),
        )

    def walk(self, statements: list[ast.stmt], conditions: tuple[str, ...]) -> None:
        for stmt in statements:
            if isinstance(stmt, ast.If):
                self.walk_if(stmt, conditions)
            elif isinstance(stmt, ast.Assign):
                self.assignment(stmt, conditions)
            elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                self.assignment(ast.Assign([stmt.target], stmt.value), conditions, node=stmt)
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                self.call(stmt.value, conditions)
            elif isinstance(stmt, _LOOPS_AND_BLOCKS):
                self.walk(stmt.body, conditions)

    def walk_if(self, stmt: ast.If, conditions: tuple[str, ...]) -> None:
        test = self.file.code(stmt.test)
        inner = stmt.body
        if (
            any(g in test for g in self.file.conv.pp_guards)
            and inner
            and all(isinstance(s, (ast.Return, ast.Raise)) for s in inner)
        ):
            self.pp_guard = True
            return
        self.walk(inner, conditions + (test,))
        # An `elif` is the one If of the else block; walking that block reads it as walk_if would.
        if stmt.orelse:
            self.walk(stmt.orelse, conditions + (f"not ({test})",))

    def assignment(self, stmt: ast.Assign, conditions: tuple[str, ...], node: ast.AST | None = None) -> None:
        for target in stmt.targets:
            if isinstance(target, ast.Name):
                if target.id == self.param:
                    # `if layer_ids is None: layer_ids = [...]`: a default given by rebinding.
                    if self.param_default is None and not self.uses_param(stmt.value):
                        self.param_default = self.file.code(stmt.value)
                    continue
                if (
                    self.param_default is None
                    and not self.uses_param(stmt.value)
                    and any(c.replace(" ", "") == f"{self.param}isNone" for c in conditions)
                    and isinstance(stmt.value, (ast.List, ast.Tuple))
                ):
                    # `if ids is None: layers = [2, n // 2, n - 3]` then handed on: the default
                    self.param_default = self.file.code(stmt.value)
                self.locals[target.id] = stmt.value
                continue
            name = last_name(target)
            if isinstance(target, ast.Attribute) and isinstance(stmt.value, ast.Constant) and stmt.value.value is True:
                self.switches.append(target.attr)
            if name in self.file.conv.attributes or (
                isinstance(target, ast.Attribute) and self.uses_param(stmt.value) and name not in self.file.conv.flags
            ):
                self.arms.append(
                    _Arm(
                        conditions,
                        self.file.code(target),
                        stmt.value,
                        self.file.code(stmt.value),
                        self.file.line(node or stmt),
                        False,
                    )
                )

    def call(self, call: ast.Call, conditions: tuple[str, ...]) -> None:
        name = last_name(call.func)
        if name in self.file.conv.setters and isinstance(call.func, ast.Attribute):
            args = arguments(call)  # the first as written, keyword or not
            arg, text = (args[0].value, self.file.code(args[0].value)) if args else (ast.Constant(None), "None")
            self.arms.append(_Arm(conditions, f"{self.file.code(call.func)}()", arg, text, self.file.line(call), True))

    # -- classification --------------------------------------------------------
    def uses_param(self, expr: ast.expr, depth: int = 0) -> bool:
        """``expr`` mentions the ids parameter, itself or through a local; a mention is any
        name ``expr`` spells (``self.layer_ids`` spells ``layer_ids``, see :func:`spelled_names`)."""
        if self.param is None or depth > 8:
            return False
        mentioned = spelled_names(expr)
        if self.param in mentioned:
            return True
        return any(
            self.uses_param(self.locals[n], depth + 1) for n in mentioned if n in self.locals and n != self.param
        )

    def is_id_list(self, expr: ast.expr) -> bool:
        """A default arm assigns a list/tuple (or a local or call producing one), not a flag."""
        if isinstance(expr, ast.Name) and expr.id in self.locals:
            return self.is_id_list(self.locals[expr.id])
        return isinstance(expr, (ast.List, ast.Tuple, ast.ListComp, ast.Call, ast.BinOp, ast.Subscript))

    def transform_of(self, expr: ast.expr, depth: int = 0) -> tuple[F.Transform, list[str]]:
        """(transform, notes) for an expression of the ids parameter."""
        if depth > 8:
            return F.OTHER, []
        if isinstance(expr, ast.Name):
            if expr.id == self.param:
                return F.IDENTITY, []
            if expr.id in self.locals:
                return self.transform_of(self.locals[expr.id], depth + 1)
            return F.OTHER, []
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in _WRAPPERS:
            args = arguments(expr)  # keyword arguments count, as written
            if len(args) == 1:
                inner, notes = self.transform_of(args[0].value, depth + 1)
                extra = _WRAPPERS[expr.func.id]
                return inner, notes + ([extra] if extra else [])
        if isinstance(expr, ast.IfExp):
            return self.defaulted(expr, depth)
        if isinstance(expr, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            if (
                len(expr.generators) != 1
                or expr.generators[0].ifs
                or not isinstance(expr.generators[0].target, ast.Name)
            ):
                return F.OTHER, []
            comp = expr.generators[0]
            source, notes = self.transform_of(comp.iter, depth + 1)
            if source != F.IDENTITY:
                return F.OTHER, notes
            var = comp.target.id  # type: ignore[attr-defined]
            element = expr.elt
            if isinstance(element, ast.Name) and element.id == var:
                return F.IDENTITY, notes
            offset = _offset(element, var)
            if offset == 1:
                return F.PLUS_ONE, notes
            if offset is not None:
                return F.OTHER, notes + [f"adds {offset}"]
            return F.OTHER, notes
        return F.OTHER, []

    def defaulted(self, expr: ast.IfExp, depth: int) -> tuple[F.Transform, list[str]]:
        """``f(ids) if ids is not None else {defaults}`` (or ``if ids``, or the arms swapped
        under ``is None`` / ``not ids``): the transform of the arm that reads the ids, with the
        other arm recorded as the default; anything else is ``other``."""
        test = expr.test
        negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
        if negated:
            test = test.operand  # type: ignore[attr-defined]
        if (
            isinstance(test, ast.Compare)
            and len(test.ops) == 1
            and isinstance(test.ops[0], (ast.Is, ast.IsNot))
            and _is_none(test.comparators[0])
        ):
            negated ^= isinstance(test.ops[0], ast.Is)
            test = test.left
        if not (isinstance(test, ast.Name) and test.id == self.param):
            return F.OTHER, []
        used, default = (expr.orelse, expr.body) if negated else (expr.body, expr.orelse)
        if self.uses_param(default) or not self.uses_param(used):
            return F.OTHER, []
        if self.param_default is None:
            self.param_default = self.file.code(default)
        transform, notes = self.transform_of(used, depth + 1)
        return transform, notes + ["default when no ids"]

    def overall(self, explicit: list[_Arm]) -> tuple[F.Transform, str | None]:
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
        others = [
            kind
            for a, kind, _ in kinds
            if not [c for c in a.conditions if c not in common and not c.startswith("not (")]
        ]
        text = "; ".join(described)
        if others:
            text += f"; else {others[0]}"
        return F.CONDITIONAL, text or None


def _is_none(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Constant) and expr.value is None


def _offset(expr: ast.expr, var: str) -> int | None:
    """k for ``var + k`` / ``k + var`` / ``var - k``, else None."""
    if not isinstance(expr, ast.BinOp):
        return None
    left, right = expr.left, expr.right
    if isinstance(expr.op, ast.Add):
        if isinstance(left, ast.Name) and left.id == var and int_value(right) is not None:
            return int_value(right)
        if isinstance(right, ast.Name) and right.id == var and int_value(left) is not None:
            return int_value(left)
    if (
        isinstance(expr.op, ast.Sub)
        and isinstance(left, ast.Name)
        and left.id == var
        and (k := int_value(right)) is not None
    ):
        return -k
    return None


__all__ = ["SetterAnalyzer"]

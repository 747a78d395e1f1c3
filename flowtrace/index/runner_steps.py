"""What the engine's runner does with the model, step by step (the serving path, link 8).

The model file says which layers a setter picks; the runner decides *when* the setter runs and
with which ids: once with the draft's ids, or first with none (the model's defaults) and later
with the draft's; before or after the device graphs are captured that decode and verify batches
replay. This module reads, for each runner function that matters, its steps in statement order:
calls of an entry setter (with the ids they hand over), calls that capture graphs or warm up
(names from the profile's ``[serving]`` table), calls of other functions the analysis may follow,
classes named (built) and returns, with the ``if`` arms around them kept as forks. Nothing is
evaluated here; :mod:`flowtrace.analysis.serving` follows the calls across files and runs the
sequence. Names come from the profile; the shapes (a setter called on another object, ids
handed as written or changed first) are recognised structurally.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Collection, Iterator, Mapping

from flowtrace.engines.profiles import Conventions
from flowtrace.index.syntax import (
    SOURCE_ORDERED,
    FunctionNode,
    arguments,
    child_fields,
    child_nodes,
    int_value,
    last_name,
)
from flowtrace.model import facts as F

_COPIES = {"list", "tuple", "sorted", "set", "frozenset"}
_Item = F.RunnerStep | F.RunnerFork


def _serving_names(conv: Conventions) -> frozenset[str]:
    return conv.startup | conv.graph_capture | conv.weight_reload | conv.warmup


def wanted(data: bytes, conv: Conventions) -> bool:
    """Cheap byte gate: the file calls an entry setter on some object, or defines a function the
    profile names as a serving entry (start-up, graph capture, warm-up, weight reload)."""
    if not conv.setters:
        return False
    if any(f".{s}(".encode() in data for s in conv.setters):
        return True
    names = _serving_names(conv)
    plain = {n for n in names if n.isascii() and n.isidentifier()}
    # one scan for every `def <name>(` (none hides another) instead of one scan per name
    if plain and not plain.isdisjoint(m.decode() for m in _DEFINED.findall(data)):
        return True
    return any(f"def {n}(".encode() in data for n in names - plain)


_DEFINED = re.compile(rb"def ([A-Za-z_][A-Za-z0-9_]*)\(")


def _functions(tree: ast.Module, module: str) -> Iterator[tuple[str, str | None, FunctionNode]]:
    """(qualified name, owning class or None, node) for module functions and class methods."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield f"{module}.{node.name}", None, node
        elif isinstance(node, ast.ClassDef):
            cls = f"{module}.{node.name}"
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield f"{cls}.{item.name}", cls, item


_SCOPE_KINDS = frozenset({ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef})  # nested scopes: not walked


def _calls_in(node: ast.AST) -> list[ast.Call]:
    """The calls of one statement (not inside nested functions), in source order.

    The walk reads each node's child fields itself (:func:`child_nodes` only for a call and a
    dict, whose children it puts in source order across fields): a call and a list per node
    was most of its cost. It meets the nodes in the same order as a walk over ``child_nodes``,
    which only matters for ties the sort keeps (positions inside an f-string)."""
    out: list[ast.Call] = []
    stack: list[ast.AST] = [node]
    pop, extend, push, scopes, node_type, call = stack.pop, stack.extend, stack.append, _SCOPE_KINDS, ast.AST, ast.Call
    while stack:
        current = pop()
        kind = current.__class__
        if kind is call:
            out.append(current)  # type: ignore[arg-type]  # kind is ast.Call
        if kind in SOURCE_ORDERED:
            extend([child for child in child_nodes(current) if child.__class__ not in scopes])
            continue
        for name in child_fields(kind):
            value = getattr(current, name, None)
            if value.__class__ is list:
                extend([item for item in value if isinstance(item, node_type) and item.__class__ not in scopes])
            elif isinstance(value, node_type) and value.__class__ not in scopes:
                push(value)
    # ties are a call and a call in its callee (``a.b(x).c(y)``): the outer one comes first in either walk
    out.sort(key=lambda c: (c.lineno, c.col_offset))
    return out


def _is_own(receiver: ast.expr) -> bool:
    """``self.set_x(...)`` / ``super().set_x(...)``: the model's own delegation, not a runner's call."""
    if isinstance(receiver, ast.Name) and receiver.id in ("self", "cls"):
        return True
    return isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name) and receiver.func.id == "super"


def classify_ids(call: ast.Call) -> tuple[F.RunnerIds, str, int | None]:
    """Which ids a setter call hands over: none (or None) -> the default; a list of numbers ->
    literal; ``[i + k for i in x]`` / arithmetic -> transformed (offset k when it is a shift);
    anything else (a name, an attribute, ``list(x)``) -> the ids the runner holds, as written."""
    args = arguments(call)
    if not args:
        return F.RunnerIds.DEFAULT, "", None
    value = args[0].value
    text = ast.unparse(value)
    while (
        isinstance(value, ast.Call) and last_name(value.func) in _COPIES and len(value.args) == 1 and not value.keywords
    ):
        value = value.args[0]
    if isinstance(value, ast.Constant) and value.value is None:
        return F.RunnerIds.DEFAULT, text, None
    if isinstance(value, (ast.List, ast.Tuple)) and all(_signed_int(e) is not None for e in value.elts):
        return F.RunnerIds.LITERAL, text, None
    if isinstance(value, (ast.ListComp, ast.GeneratorExp)):
        return F.RunnerIds.TRANSFORMED, text, _shift(value)
    if isinstance(value, ast.BinOp):
        return F.RunnerIds.TRANSFORMED, text, None
    return F.RunnerIds.GIVEN, text, None


def _signed_int(node: ast.expr) -> int | None:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = int_value(node.operand)
        return -inner if inner is not None else None
    return int_value(node)


def _shift(comp: ast.ListComp | ast.GeneratorExp) -> int | None:
    """k for ``[v + k for v in ids]`` (``k + v``, ``v - k``), one generator, no filter."""
    if len(comp.generators) != 1 or comp.generators[0].ifs or not isinstance(comp.generators[0].target, ast.Name):
        return None
    var, elt = comp.generators[0].target.id, comp.elt
    if isinstance(elt, ast.Name) and elt.id == var:
        return 0
    if not isinstance(elt, ast.BinOp):
        return None
    left_var = isinstance(elt.left, ast.Name) and elt.left.id == var
    right_var = isinstance(elt.right, ast.Name) and elt.right.id == var
    if isinstance(elt.op, ast.Add) and left_var and (k := _signed_int(elt.right)) is not None:
        return k
    if isinstance(elt.op, ast.Add) and right_var and (k := _signed_int(elt.left)) is not None:
        return k
    if isinstance(elt.op, ast.Sub) and left_var and (k := _signed_int(elt.right)) is not None:
        return -k
    return None


class _Reader:
    """Reads the steps of the functions of one module (see the module doc)."""

    def __init__(
        self,
        path: str,
        module: str,
        conv: Conventions,
        imports: Mapping[str, str],
        local_classes: Mapping[str, str],
        lines: list[str] | None = None,
    ) -> None:
        self.path, self.module, self.conv = path, module, conv
        self.imports, self.local_classes = imports, local_classes
        self.lines = lines
        self.names = _serving_names(conv)
        self.callees = frozenset(conv.setters | conv.graph_capture | conv.warmup)  # what makes a call direct
        self.recorded: set[str] = set()  # names of this module's functions whose steps are kept
        self.module_functions: set[str] = set()
        self.calls: dict[FunctionNode, list[ast.Call]] = {}  # each function's calls, found once for the fixpoint

    def calls_of(self, fn: FunctionNode) -> list[ast.Call]:
        found = self.calls.get(fn)
        if found is None:
            found = self.calls[fn] = _calls_in(fn)
        return found

    def loc(self, node: ast.AST) -> F.Location:
        return F.Location(self.path, node.lineno)  # type: ignore[attr-defined]

    def names_none(self, fn: FunctionNode, names: Collection[str]) -> bool:
        """The function's text (decorators to last line) is ASCII and spells none of ``names``: then
        none of its calls is named so (a non-ASCII text may spell a name the parser normalises),
        and its calls need not be found. False without the file's lines."""
        if self.lines is None:
            return False
        first = min([fn.lineno, *(d.lineno for d in fn.decorator_list)])
        text = "\n".join(self.lines[first - 1 : fn.end_lineno or fn.lineno])
        return text.isascii() and not any(name in text for name in names)

    # -- which functions matter -----------------------------------------------------
    def direct(self, fn: FunctionNode) -> bool:
        """The function calls a setter on another object, or a capture / warm-up call, or is a
        serving entry itself."""
        if fn.name in self.names:
            return True
        if self.names_none(fn, self.callees):
            return False
        for call in self.calls_of(fn):
            name = last_name(call.func)
            if name in self.conv.setters and isinstance(call.func, ast.Attribute) and not _is_own(call.func.value):
                return True
            if name in self.conv.graph_capture or name in self.conv.warmup:
                return True
        return False

    def choose(self, functions: list[tuple[str, str | None, FunctionNode]]) -> None:
        """The functions with steps of their own, and (to a fixpoint) those calling one of them
        on ``self`` or by its bare name."""
        self.module_functions = {fn.name for _, cls, fn in functions if cls is None}
        self.recorded = {fn.name for _, _, fn in functions if fn.name not in self.conv.setters and self.direct(fn)}
        changed = True
        while changed:
            changed = False
            for _, _, fn in functions:
                if fn.name in self.recorded or fn.name in self.conv.setters or self.names_none(fn, self.recorded):
                    continue
                if any(self.local_call(call) for call in self.calls_of(fn)):
                    self.recorded.add(fn.name)
                    changed = True

    def local_call(self, call: ast.Call) -> bool:
        func = call.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
            return func.attr in self.recorded
        return isinstance(func, ast.Name) and func.id in self.recorded and func.id in self.module_functions

    # -- steps ------------------------------------------------------------------------
    def block(self, body: list[ast.stmt], repeated: bool) -> tuple[_Item, ...]:
        out: list[_Item] = []
        for stmt in body:
            out.extend(self.statement(stmt, repeated))
        return tuple(out)

    def statement(self, stmt: ast.stmt, repeated: bool) -> list[_Item]:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return []
        if isinstance(stmt, ast.If):
            head = self.steps_of(stmt.test, repeated)
            arms = (self.block(stmt.body, repeated), self.block(stmt.orelse, repeated))
            if any(arms):
                head.append(F.RunnerFork(self.loc(stmt), ast.unparse(stmt.test), arms))
            return head
        if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)):
            head = self.steps_of(stmt.iter if isinstance(stmt, (ast.For, ast.AsyncFor)) else stmt.test, repeated)
            return head + list(self.block(stmt.body, True)) + list(self.block(stmt.orelse, repeated))
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            head = [s for item in stmt.items for s in self.steps_of(item.context_expr, repeated)]
            return head + list(self.block(stmt.body, repeated))
        if isinstance(stmt, ast.Try):
            # the body as it runs; the handlers are the failure path (kept as a fork from here)
            body = list(self.block(stmt.body, repeated)) + list(self.block(stmt.orelse, repeated))
            handlers = tuple(self.block(h.body, repeated) for h in stmt.handlers)
            if any(handlers):
                body = [F.RunnerFork(self.loc(stmt), "an exception", (tuple(body), *handlers))]
            return body + list(self.block(stmt.finalbody, repeated))
        found = self.steps_of(stmt, repeated)
        if isinstance(stmt, ast.Return):
            found.append(F.RunnerStep(F.RunnerStepKind.RETURN, "return", self.loc(stmt)))
        return found

    def steps_of(self, node: ast.AST, repeated: bool) -> list[_Item]:
        out: list[_Item] = []
        for call in _calls_in(node):
            step = self.call_step(call, repeated)
            if step is not None:
                out.append(step)
        built = self.builds(node, repeated)
        if len(built) > 1:  # `{"cpu": A, "gpu": B}[device](...)`: one of them is built
            out.append(
                F.RunnerFork(
                    self.loc(node),
                    "one of " + ", ".join(b.name.rsplit(".", 1)[-1] for b in built),
                    tuple((b,) for b in built),
                )
            )
        else:
            out.extend(built)
        return out

    def call_step(self, call: ast.Call, repeated: bool) -> F.RunnerStep | None:
        func = call.func
        name = last_name(func)
        if name is None:
            return None
        where = self.loc(call)
        if isinstance(func, ast.Attribute) and name in self.conv.setters and not _is_own(func.value):
            ids, text, offset = classify_ids(call)
            return F.RunnerStep(
                F.RunnerStepKind.SETTER,
                name,
                where,
                receiver=ast.unparse(func.value),
                ids=ids,
                ids_text=text,
                offset=offset,
                repeated=repeated,
            )
        if isinstance(func, ast.Name) and name[:1].isupper():
            return None  # a class built: a BUILD step (see builds)
        target = self.target(func)
        if name in self.conv.graph_capture:
            return F.RunnerStep(F.RunnerStepKind.CAPTURE, name, where, target=target, repeated=repeated)
        if name in self.conv.warmup:
            return F.RunnerStep(F.RunnerStepKind.WARMUP, name, where, target=target, repeated=repeated)
        if self.local_call(call) or (isinstance(func, ast.Name) and func.id in self.imports) or name in self.names:
            return F.RunnerStep(F.RunnerStepKind.CALL, name, where, target=target, repeated=repeated)
        return None

    def target(self, func: ast.expr) -> str:
        if isinstance(func, ast.Attribute):
            return "self" if isinstance(func.value, ast.Name) and func.value.id == "self" else ""
        if isinstance(func, ast.Name):
            if func.id in self.imports:
                return self.imports[func.id]
            if func.id in self.module_functions:
                return f"{self.module}.{func.id}"
        return ""

    def builds(self, node: ast.AST, repeated: bool) -> list[F.RunnerStep]:
        """Classes a statement names as a value (``Cls(...)``, ``lambda: Cls``, ``{"cpu": Cls}``):
        one of them may be built here, and its ``__init__`` may set ids or capture graphs. Not a
        class whose attribute is read (``Mode.FULL``), tested (``isinstance(x, Cls)``) or raised."""
        out: list[F.RunnerStep] = []
        seen: set[str] = set()
        for sub in _value_names(node):
            if sub.id[:1].isupper() and sub.id not in seen:
                qualified = self.local_classes.get(sub.id) or self.imports.get(sub.id)
                if qualified:
                    seen.add(sub.id)
                    out.append(F.RunnerStep(F.RunnerStepKind.BUILD, qualified, self.loc(sub), repeated=repeated))
        return out


def _value_names(node: ast.AST) -> Iterator[ast.Name]:
    """Names loaded as values below ``node`` (see :meth:`_Reader.builds` for what is skipped)."""
    stack: list[ast.AST] = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, (ast.Raise, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(current, ast.Attribute):
            if not isinstance(current.value, ast.Name):
                stack.append(current.value)
            continue
        if isinstance(current, ast.Call) and last_name(current.func) in ("isinstance", "issubclass", "type"):
            continue
        if isinstance(current, ast.Name) and isinstance(current.ctx, ast.Load):
            yield current
        stack.extend(ast.iter_child_nodes(current))


def runner_functions(
    path: str,
    module: str,
    tree: ast.Module,
    conv: Conventions,
    imports: Mapping[str, str],
    lines: list[str] | None = None,
) -> tuple[F.RunnerFunctionFact, ...]:
    """The runner functions of one module with their steps (see the module doc). ``lines``: the
    file's lines as the parser numbers them, when known (they spare walking the functions whose
    text names no call that could matter)."""
    local_classes = {n.name: f"{module}.{n.name}" for n in tree.body if isinstance(n, ast.ClassDef)}
    reader = _Reader(path, module, conv, imports, local_classes, lines)
    functions = list(_functions(tree, module))
    reader.choose(functions)
    out = []
    for qualname, cls, fn in functions:
        if fn.name not in reader.recorded:
            continue
        steps = reader.block(fn.body, False)
        if steps or fn.name in reader.names:
            out.append(F.RunnerFunctionFact(qualname, cls, fn.name, F.Location(path, fn.lineno), steps))
    return tuple(out)


__all__ = ["classify_ids", "runner_functions", "wanted"]

"""Find capture sites in a forward: how capture indices become captured states.

A capture site is a layer loop that records a state when its index is in the capture
attribute. Three shapes cover the engines seen so far, and each is recognised by its
structure, never by a model name:

* **append**: ``if i in self.<attr>: aux.append(h + r)`` before or after ``layer(...)``;
* **callback / packer**: ``layer(..., kw=aux.capture if i in self.<attr> else None)``: the
  point is decided later by following ``kw`` into the layer's forward (see
  :class:`flowtrace.model.facts.CallbackUse`);
* **helper**: ``self.<helper>(aux, label, h, r)`` with the label an offset of the loop index;
* **buffer**: ``buf[k].copy_(h + r)`` / ``buf[:, a:b] = h`` under a membership test: a slice of
  a preallocated tensor written in place instead of an append.

The capture point follows from two numbers: the boundary the recorded stream sits at
(loop index, plus one when recorded after the layer call) and the label checked against the
capture attribute. Equal means ``input``; one more means ``output``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from flowtrace.model import facts as F

from flowtrace.index.streams import (
    NoneAtEntry,
    binds,
    none_at_entry,
    rebinds,
    rebound_unconditionally,
    spelled_names,
    tested_names,
    unguarded_operand,
)
from flowtrace.index.syntax import (
    FastVisitor,
    FunctionNode,
    Position,
    arguments,
    dotted,
    end_of,
    int_value,
    is_name,
    iter_nodes,
    keyword_args,
    last_name,
    parameter_names,
    parameters,
    positional,
    start_of,
    string_value,
    walk_statements,
)

if TYPE_CHECKING:
    from flowtrace.index.visitors import FileAnalyzer, _Class


# Calls that derive a collection from the capture attribute without changing its members.
_DERIVATIONS = {"set", "frozenset", "list", "tuple", "sorted"}
_LOOPS = (ast.For, ast.AsyncFor)
# Blocks whose body runs whenever the statement does (as libcst's With and Try: ``async with``, not ``try/except*``).
_UNCONDITIONAL_BLOCKS = (ast.With, ast.AsyncWith, ast.Try)
LoopNode = ast.For | ast.AsyncFor


def offset_of(expr: ast.expr, var: str) -> int | None:
    """0 for ``var``, k for ``var + k`` / ``k + var``, -k for ``var - k``, else None."""
    if is_name(expr, var):
        return 0
    if isinstance(expr, ast.BinOp):
        left, right = expr.left, expr.right
        if isinstance(expr.op, ast.Add):
            if is_name(left, var) and (k := int_value(right)) is not None:
                return k
            if is_name(right, var) and (k := int_value(left)) is not None:
                return k
        if isinstance(expr.op, ast.Sub) and is_name(left, var) and (k := int_value(right)) is not None:
            return -k
    return None


def point_for(boundary_offset: int, label_offset: int) -> str:
    diff = boundary_offset - label_offset
    return F.INPUT if diff == 0 else F.OUTPUT if diff == 1 else F.UNKNOWN


class _Nodes(FastVisitor):
    """Collects calls, if-expressions and if-statements below a node, with their ancestors' tests."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[ast.Call, tuple[ast.expr, ...]]] = []
        self.ifexps: list[ast.IfExp] = []
        self._tests: list[ast.expr] = []

    def visit_If(self, node: ast.If) -> None:
        self._tests.append(node.test)

    def leave_If(self, original_node: ast.If) -> None:
        self._tests.pop()

    def visit_Call(self, node: ast.Call) -> None:
        self.calls.append((node, tuple(self._tests)))

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self.ifexps.append(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> bool:
        return False

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> bool:
        return False


@dataclass
class _LoopContext:
    """What the site finders of one layer loop share."""

    loop: LoopNode
    layer_call: ast.Call
    index: str
    containers: dict[str, str]
    bound: dict[str, ast.expr]
    none_at_entry: dict[str, NoneAtEntry]
    pre: bool
    post: bool
    base: dict[str, object] = field(default_factory=dict)


class LoopAnalyzer:
    def __init__(self, file: FileAnalyzer, info: _Class, fn: FunctionNode) -> None:
        self.file = file
        self.info = info
        self.fn = fn
        self.conv = file.conv
        self.function = f"{info.name}.{fn.name}"
        self.attrs = self.conv.attributes

    def facts(self) -> tuple[list[F.LayerLoopFact], list[F.CaptureSiteFact]]:
        statements = walk_statements(self.fn.body)
        loops = [s for s in statements if isinstance(s, _LOOPS)]
        if not loops:
            return [], []
        containers = self.containers(statements) | self.dict_parameters()
        self.aliases = self.attribute_aliases(statements)
        self.hook_objects = self.objects_built_from_attribute(statements)
        loop_facts: list[F.LayerLoopFact] = []
        sites: list[F.CaptureSiteFact] = []
        for loop in loops:
            layer_call = self.layer_call(loop)
            if layer_call is None:
                continue
            found = self.captures(loop, layer_call, containers, statements)
            loop_facts.append(F.LayerLoopFact(self.info.qualname, self.function, self.file.loc(loop), bool(found)))
            sites.extend(found)
        return loop_facts, sites

    # -- structure ---------------------------------------------------------------
    def containers(self, statements: list) -> dict[str, str]:
        """Container variables and the class (or literal) they were built from; the
        construction calls are kept in ``self.built`` for the fixed-slot facts."""
        out: dict[str, str] = {}
        self.built: dict[str, ast.Call] = {}
        for stmt in statements:
            value = None
            targets: list[ast.expr] = []
            if isinstance(stmt, ast.Assign):
                value, targets = stmt.value, list(stmt.targets)
            elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                value, targets = stmt.value, [stmt.target]
            if value is None:
                continue
            kind = self.container_kind(value)
            if kind:
                for target in targets:
                    if isinstance(target, ast.Name):
                        out.setdefault(target.id, kind)
                        if isinstance(value, ast.Call):
                            self.built.setdefault(target.id, value)
        return out

    def dict_parameters(self) -> dict[str, str]:
        """Parameters annotated ``dict[...]``: a caller's dict handed to a helper method that
        runs the layers and stores into it by layer."""
        out: dict[str, str] = {}
        for param in parameters(self.fn, kwonly=True):
            annotation = param.node.annotation
            base = annotation.value if isinstance(annotation, ast.Subscript) else annotation
            if (last_name(base) if base is not None else None) in {"dict", "Dict"}:
                out[param.name] = "dict"
        return out

    def attribute_aliases(self, statements: list) -> dict[str, str]:
        """Locals derived from a capture attribute (``s = frozenset(self.<attr>)``,
        ``wanted = self.<attr>``): a membership test of them is a test of the attribute."""
        out: dict[str, str] = {}
        for stmt in statements:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                value = stmt.value
                if isinstance(value, ast.Call) and last_name(value.func) in _DERIVATIONS and len(arguments(value)) == 1:
                    value = arguments(value)[0].value
                if isinstance(value, ast.Attribute) and value.attr in self.attrs:
                    out[stmt.targets[0].id] = value.attr
        return out

    def objects_built_from_attribute(self, statements: list) -> dict[str, tuple[ast.Call, str]]:
        """Locals built as ``Cls(..., self.<attr>, ...)`` (a metadata object carrying the
        capture indices): handed to each layer, the layer itself may record through it."""
        out: dict[str, tuple[ast.Call, str]] = {}
        for stmt in statements:
            if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
                continue
            call = stmt.value
            if not (isinstance(call, ast.Call) and (last_name(call.func) or "")[:1].isupper()):
                continue
            for arg in arguments(call):
                value = arg.value
                attribute = value.attr if isinstance(value, ast.Attribute) and value.attr in self.attrs else None
                attribute = attribute or (self.aliases.get(value.id) if isinstance(value, ast.Name) else None)
                if attribute:
                    out.setdefault(stmt.targets[0].id, (call, attribute))
                    break
        return out

    def container_kind(self, value: ast.expr) -> str | None:
        if isinstance(value, ast.List) and not value.elts:
            return "list"
        if isinstance(value, ast.Dict) and not value.keys:
            return "dict"
        if not isinstance(value, ast.Call):
            return None
        callee = last_name(value.func) or ""
        if callee in self.conv.containers or callee in self.conv.packers:
            return callee
        if callee == "for_batch" and isinstance(value.func, ast.Attribute):
            return last_name(value.func.value) or callee
        if any(h.name == callee for h in self.conv.helpers):
            return "list"
        if self.sized_by(value) is not None and callee[:1].isupper():
            return callee  # any class built with one slot per capture index
        return None

    def sized_by(self, call: ast.Call) -> str | None:
        """``len(self.<attr>)`` among a constructor's arguments: one slot per capture index."""
        for arg in arguments(call):
            value = arg.value
            if isinstance(value, ast.Call) and last_name(value.func) == "len" and (value.args or value.keywords):
                inner = arguments(value)[0].value
                if isinstance(inner, ast.Attribute) and inner.attr in self.attrs:
                    return self.file.code(value)
        return None

    def slot_facts(self, container: str | None, loop: LoopNode) -> dict[str, object]:
        """Fixed-slot facts for a site's container: its class, what sizes it, and the
        method the forward calls on it after the loop (``aux.finalize()``)."""
        call = self.built.get(container or "")
        if call is None:
            return {}
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr == "for_batch":
            func = func.value
        name = dotted(func)
        out: dict[str, object] = {"container_class": self.file.resolve(name) if name else None, "container_sized_by": self.sized_by(call)}
        loop_end = end_of(loop)[0]
        nodes = _Nodes()
        nodes.walk(self.fn.body)
        for method_call, _ in nodes.calls:
            f = method_call.func
            if (
                isinstance(f, ast.Attribute)
                and isinstance(f.value, ast.Name)
                and f.value.id == container
                and not (method_call.args or method_call.keywords)
                and self.file.line(method_call) > loop_end
            ):
                out["finalize_method"] = f.attr
                out["finalize_at"] = self.file.loc(method_call)
                out["empty_return_at"] = self.empty_return(container, loop_end, self.file.line(method_call))
                break
        return out

    def empty_return(self, container: str, after: int, before: int) -> F.Location | None:
        """``if len(aux) == 0: return ...`` (or ``if not aux``) between the loop and the
        finalize call: an empty collector is then never finalized."""
        for stmt in walk_statements(self.fn.body):
            line = self.file.line(stmt)
            if isinstance(stmt, ast.If) and after < line < before and container in spelled_names(stmt.test):
                if any(isinstance(b, ast.Return) for b in stmt.body):
                    return self.file.loc(stmt)
        return None

    def loop_variables(self, loop: LoopNode) -> tuple[str | None, str | None]:
        """(index variable, layer variable) of ``for i in ...`` / ``for i, layer in enumerate(...)``."""
        target = loop.target
        if isinstance(target, ast.Name):
            return target.id, None
        if isinstance(target, ast.Tuple) and len(target.elts) == 2:
            a, b = (_element(e) for e in target.elts)
            return (a.id if isinstance(a, ast.Name) else None, b.id if isinstance(b, ast.Name) else None)
        return None, None

    def layer_call(self, loop: LoopNode) -> ast.Call | None:
        """The call that runs one decoder layer inside the loop, if this is a layer loop."""
        index, layer_var = self.loop_variables(loop)
        layer_names = {layer_var} if layer_var else set()
        iter_text = self.file.code(loop.iter)
        layers_attr = any(f"self.{a}" in iter_text for a in self.conv.layers_attributes)
        if not layer_var and layers_attr and index:
            layer_names.add(index)  # for layer in self.layers
        for stmt in walk_statements(loop.body):
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Subscript):
                if (dotted(stmt.value.value) or "").split(".")[-1] in self.conv.layers_attributes:
                    for t in stmt.targets:
                        if isinstance(t, ast.Name):
                            layer_names.add(t.id)
        nodes = _Nodes()
        nodes.walk(loop.body)
        for call, _ in nodes.calls:
            func = call.func
            if isinstance(func, ast.Name) and func.id in layer_names:
                return call
            if isinstance(func, ast.Subscript) and (dotted(func.value) or "").split(".")[-1] in self.conv.layers_attributes:
                return call
        return None

    # -- captures ---------------------------------------------------------------
    def captures(self, loop: LoopNode, layer_call: ast.Call, containers: dict[str, str], statements: list) -> list[F.CaptureSiteFact]:
        index, _ = self.loop_variables(loop)
        if index is None:
            return []
        split = self.splits_residual(loop, layer_call)
        pre, post = self.outside_captures(loop, statements, containers)
        self.context = _LoopContext(
            loop=loop,
            layer_call=layer_call,
            index=index,
            containers=containers,
            bound=self.loop_locals(loop),
            none_at_entry=none_at_entry(self.fn, loop, statements),
            pre=pre,
            post=post,
            base=dict(
                class_qualname=self.info.qualname,
                function=self.function,
                loop_range=" ".join(self.file.code(loop.iter).split()),
                loop_variable=index,
                split_residual=split,
                post_loop_at=self.post_at,
            ),
        )
        found = self.callback_sites() + self.dict_sites() + self.hook_sites()
        nodes = _Nodes()
        nodes.walk(loop.body)
        found += self.buffer_sites(nodes.calls)
        call_start, call_end = start_of(layer_call), end_of(layer_call)
        for call, tests in nodes.calls:
            start = start_of(call)
            after = start > call_end
            before = start < call_start
            if not (after or before):
                continue
            site = self.helper_site(call, after) or self.append_site(call, tests, after)
            if site is not None:
                found.append(site)
        return found

    def splits_residual(self, loop: LoopNode, layer_call: ast.Call) -> bool:
        for stmt in walk_statements(loop.body):
            if isinstance(stmt, ast.Assign) and stmt.value is layer_call:
                for t in stmt.targets:
                    elements = [_element(e) for e in t.elts] if isinstance(t, (ast.Tuple, ast.List)) else []
                    if any(isinstance(e, ast.Name) and "residual" in e.id for e in elements):
                        return True
        return False

    def loop_locals(self, loop: LoopNode) -> dict[str, ast.expr]:
        """Locals bound in the loop body: `cb = aux.capture if i in attr else None; layer(..., capture_output=cb)`."""
        bound: dict[str, ast.expr] = {}
        for stmt in walk_statements(loop.body):
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                bound.setdefault(stmt.targets[0].id, stmt.value)
        return bound

    def callback_sites(self) -> list[F.CaptureSiteFact]:
        """A callback or collector handed to the layer call under a membership test."""
        ctx = self.context
        found: list[F.CaptureSiteFact] = []
        for arg in arguments(ctx.layer_call):
            value = arg.value
            if isinstance(value, ast.Name) and value.id in ctx.bound:
                value = ctx.bound[value.id]
            if not (isinstance(value, ast.IfExp) and _is_none(value.orelse)):
                continue
            attribute = self.condition_attribute(value.test)
            if attribute is None:
                continue
            carried = dotted(value.body) or self.file.code(value.body)
            container = carried.split(".")[0]
            mechanism = F.PACKER if self.is_packer(container) else F.CALLBACK
            keyword = arg.keyword
            note = (
                f"{carried} handed to layer {ctx.index} as {keyword}=; point decided in the layer's forward"
                if keyword
                else f"{carried} handed to layer {ctx.index} positionally; cannot follow it"
            )
            found.append(
                F.CaptureSiteFact(
                    **ctx.base,
                    location=self.file.loc(arg.node),
                    mechanism=mechanism,
                    point=F.UNKNOWN,
                    attribute=attribute,
                    container=container,
                    note=note,
                    embedding_capturable=None,
                    last_layer_capturable=None,
                    callback_parameter=keyword,
                    captured_expression=None,
                    label_offset=self.condition_label(value.test, ctx.index),
                    **self.slot_facts(container, ctx.loop),
                )
            )
        return found

    def hook_sites(self) -> list[F.CaptureSiteFact]:
        """``layer(..., kw=meta)`` where ``meta = Cls(self.<attr>)``: the layer records
        through a method of the object it is handed (a metadata hook). No membership test is
        in the loop; the object carries the indices. The point is decided by where the
        layer's forward calls it (:meth:`flowtrace.analysis.resolve.Project.callback_point`)."""
        ctx = self.context
        found: list[F.CaptureSiteFact] = []
        for arg in arguments(ctx.layer_call):
            value = arg.value
            if arg.keyword is None or not isinstance(value, ast.Name) or value.id in ctx.bound or value.id not in self.hook_objects:
                continue
            call, attribute = self.hook_objects[value.id]
            cls = dotted(call.func)
            found.append(
                F.CaptureSiteFact(
                    **ctx.base,
                    location=self.file.loc(arg.node),
                    mechanism=F.Mechanism.HOOK,
                    point=F.UNKNOWN,
                    attribute=attribute,
                    container=value.id,
                    note=f"{value.id} = {self.file.code(call.func)}(...self.{attribute}...) handed to layer {ctx.index} as {arg.keyword}=; point decided where the layer's forward calls it",
                    embedding_capturable=None,
                    last_layer_capturable=None,
                    callback_parameter=arg.keyword,
                    container_class=self.file.resolve(cls) if cls else None,
                    label_offset=0,  # the layer passes its own index
                )
            )
        return found

    def dict_sites(self) -> list[F.CaptureSiteFact]:
        """``by_layer[i] = x`` under a membership test: a dict keyed by layer."""
        ctx = self.context
        call_start = start_of(ctx.layer_call)
        found: list[F.CaptureSiteFact] = []
        for stmt, tests in _assignments(ctx.loop.body, ()):
            target = stmt.targets[0] if len(stmt.targets) == 1 else None
            if not (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and ctx.containers.get(target.value.id) == "dict"):
                continue
            if isinstance(target.slice, (ast.Slice, ast.Tuple)):
                continue  # one index, not a slice nor several
            label = offset_of(target.slice, ctx.index)
            attribute = next((a for a in map(self.condition_attribute, tests) if a), None)
            flagged = self.flagged_output(tests) if attribute is None else None
            if flagged is not None and flagged[2] == label == 0:  # the point is then relative to layer i itself
                found.append(self.flagged_dict_site(stmt, target, flagged))
                continue
            if label is None or attribute is None:
                continue
            after = start_of(stmt) > call_start
            container = target.value.id
            stream = {} if after else self.first_iteration(stmt, stmt.value, tests)
            found.append(
                F.CaptureSiteFact(
                    **ctx.base,
                    location=self.file.loc(stmt),
                    mechanism=F.Mechanism.DICT,
                    point=point_for(1 if after else 0, label),
                    attribute=attribute,
                    container=container,
                    note=f"{container}[{self.file.code(target.slice)}] = ... {'after' if after else 'before'} layer {ctx.index} runs, when {self.file.code(tests[-1])}",
                    **self.reach(after),
                    captured_expression=self.file.code(stmt.value),
                    uses_residual=_depends_on_residual(stmt.value, ctx.bound),
                    label_offset=label,
                    concat_order=self.read_order(container),
                    **stream,
                )
            )
        return found

    def flagged_output(self, tests: tuple) -> tuple[str, str, int | None] | None:
        """(attribute, keyword, label) when a test is ``v is not None`` for a value the layer
        call returns and the call is handed ``kw=i + k in self.<attr>``: the layer returns the
        state only when flagged, so the None test stands for the membership test."""
        ctx = self.context
        returned = self.layer_outputs()
        for test in tests:
            if not (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id in returned):
                continue
            if len(test.ops) != 1 or not isinstance(test.ops[0], ast.IsNot) or not _is_none(test.comparators[0]):
                continue
            for arg in arguments(ctx.layer_call):
                value = arg.value
                if arg.keyword is None or not (isinstance(value, ast.Compare) and isinstance(value.ops[0], ast.In)):
                    continue
                attribute = self.condition_attribute(value)
                if attribute is not None:
                    return attribute, arg.keyword, self.condition_label(value, ctx.index)
        return None

    def layer_outputs(self) -> set[str]:
        """Names the loop binds from the layer call's result (``h, r, extra = layer(...)``)."""
        ctx = self.context
        for stmt in walk_statements(ctx.loop.body):
            if isinstance(stmt, ast.Assign) and stmt.value is ctx.layer_call:
                return {n for t in stmt.targets for n in spelled_names(t)}
        return set()

    def flagged_dict_site(self, stmt: ast.Assign, target: ast.Subscript, flagged: tuple[str, str, int | None]) -> F.CaptureSiteFact:
        """A dict store of what the layer returns under a flag it is handed: which boundary the
        layer returns is decided in its forward, as for a callback handed to it."""
        ctx = self.context
        attribute, keyword, label = flagged
        container = target.value.id  # type: ignore[attr-defined]  # a Name, checked by the caller
        return F.CaptureSiteFact(
            **ctx.base,
            location=self.file.loc(stmt),
            mechanism=F.Mechanism.DICT,
            point=F.UNKNOWN,
            attribute=attribute,
            container=container,
            note=f"{container}[{self.file.code(target.slice)}] = what layer {ctx.index} returns when handed {keyword}=; point decided in the layer's forward",
            embedding_capturable=None,
            last_layer_capturable=None,
            callback_parameter=keyword,
            captured_expression=None,  # what the layer returns is built in its forward, not here
            label_offset=label,
            concat_order=self.read_order(container),
        )

    def buffer_writes(self, calls: list) -> list[tuple[ast.AST, ast.Subscript, ast.expr, tuple]]:
        """(statement or call, written slice, written value, tests around it) of the loop body's
        ``buf[...].copy_(x)`` calls and ``buf[...] = x`` assignments; a known local list or
        dict is left to the append and dict finders."""
        ctx = self.context
        out: list[tuple[ast.AST, ast.Subscript, ast.expr, tuple]] = []
        for call, tests in calls:
            func = call.func
            if isinstance(func, ast.Attribute) and func.attr == "copy_" and isinstance(func.value, ast.Subscript) and (call.args or call.keywords):
                out.append((call, func.value, arguments(call)[0].value, tests))
        for stmt, tests in _assignments(ctx.loop.body, ()):
            target = stmt.targets[0] if len(stmt.targets) == 1 else None
            if isinstance(target, ast.Subscript):
                out.append((stmt, target, stmt.value, tests))
        return [w for w in out if dotted(w[1].value) is not None and (dotted(w[1].value) or "") not in ctx.containers]

    def buffer_sites(self, calls: list) -> list[F.CaptureSiteFact]:
        """``buf[k].copy_(x)`` / ``buf[:, k * H:(k + 1) * H] = x`` under a membership test of a
        capture attribute: the state is copied into a preallocated buffer. The point follows
        the test's label and the side of the layer call, as for an append; a copy is never a
        reference, so no later in-place update reaches it."""
        ctx = self.context
        call_start = start_of(ctx.layer_call)
        found: list[F.CaptureSiteFact] = []
        for node, target, value, tests in self.buffer_writes(calls):
            test = next((t for t in reversed(tests) if self.condition_attribute(t) is not None), None)
            if test is None:
                continue
            attribute, label = self.condition_attribute(test), self.condition_label(test, ctx.index)
            after = start_of(node) > call_start
            container = dotted(target.value) or ""
            stream = {} if after else self.first_iteration(node, value, tests)
            if isinstance(value, ast.Name) and value.id in ctx.bound:
                captured = self.file.code(ctx.bound[value.id])
            else:
                captured = self.file.code(value)
            found.append(
                F.CaptureSiteFact(
                    **ctx.base,
                    location=self.file.loc(node),
                    mechanism=F.Mechanism.BUFFER,
                    point=point_for(1 if after else 0, label) if label is not None else F.UNKNOWN,
                    attribute=attribute,
                    container=container,
                    note=f"{self.file.code(target)} <- {captured} {'after' if after else 'before'} layer {ctx.index} runs, when {self.file.code(test)}",
                    **self.reach(after),
                    captured_expression=captured,
                    uses_residual=_depends_on_residual(value, ctx.bound),
                    label_offset=label,
                    **stream,
                )
            )
        return found

    def reach(self, after: bool) -> dict[str, bool]:
        """The end boundaries a loop site can record: b=0 only before layer i runs (or with a
        capture before the loop), b=L only after it (or with a capture after the loop)."""
        ctx = self.context
        return {"embedding_capturable": bool(ctx.pre) or not after, "last_layer_capturable": bool(ctx.post) or after}

    def read_order(self, container: str) -> str:
        """``[d[i] for i in self.<attr> ...]`` reads a dict in config order; anything else
        (``list(d.values())``) in insertion order, which is the loop's. A dict handed in as a
        parameter is read where the caller (a method of the class) keeps it."""
        places = [(self.fn, container)] + self.handed_in_by(container)
        return F.ConcatOrder.CONFIG if any(self.reads_in_config_order(fn, name) for fn, name in places) else F.ConcatOrder.LOOP

    def reads_in_config_order(self, fn: FunctionNode, container: str) -> bool:
        for node in iter_nodes(fn.body, into_functions=False):
            if isinstance(node, (ast.ListComp, ast.GeneratorExp)) and node.generators:
                element = node.elt
                reads = isinstance(element, ast.Subscript) and isinstance(element.value, ast.Name) and element.value.id == container
                if reads and self.condition_attribute(node.generators[0].iter) is not None:
                    return True
        return False

    def handed_in_by(self, parameter: str) -> list[tuple[FunctionNode, str]]:
        """(method, local name) for each ``self.<this function>(...)`` call in the class that
        hands a local name in as ``parameter``."""
        params = parameter_names(self.fn)
        if parameter not in params + [a.arg for a in self.fn.args.kwonlyargs]:
            return []
        position = params.index(parameter) - 1 if parameter in params else None  # after self
        out: list[tuple[FunctionNode, str]] = []
        for method in self.info.methods.values():
            for node in iter_nodes(method.body, into_functions=False):
                if not (isinstance(node, ast.Call) and dotted(node.func) == f"self.{self.fn.name}"):
                    continue
                values = [a.value for a in positional(node)]
                named = keyword_args(node)
                value = named.get(parameter) or (values[position] if position is not None and 0 <= position < len(values) else None)
                if isinstance(value, ast.Name):
                    out.append((method, value.id))
        return out

    def is_packer(self, container: str) -> bool:
        kind = self.context.containers.get(container)
        return kind in self.conv.packers or (container in self.built and self.sized_by(self.built[container]) is not None)

    def helper_site(self, call: ast.Call, after: bool) -> F.CaptureSiteFact | None:
        """``self.<helper>(aux, label, h, r)`` with the label an offset of the loop index."""
        ctx = self.context
        method = last_name(call.func)
        helper = next((h for h in self.conv.helpers if h.name == method), None)
        label_arg, structural = (helper.label_arg, None) if helper is not None else (self.structural_label(call), method)
        args = arguments(call)
        if label_arg is None or not isinstance(call.func, ast.Attribute) or len(args) <= label_arg:
            return None
        label = offset_of(args[label_arg].value, ctx.index)
        point = point_for(1 if after else 0, label) if label is not None else F.UNKNOWN
        stored_args = [a.value for a in args[label_arg + 1 :][:2] if not _is_none(a.value)]
        return F.CaptureSiteFact(
            **ctx.base,
            location=self.file.loc(call),
            mechanism=F.HELPER,
            point=point,
            attribute=None,
            container=self.file.code(args[0].value) if args else None,
            note=f"{method} labels the stream {'after' if after else 'before'} layer {ctx.index} as {self.file.code(args[label_arg].value)}",
            # recorded before layer idx: boundaries from 0; after it: up to L
            **self.reach(after),
            captured_expression=" + ".join(self.file.code(a) for a in stored_args),
            uses_residual=any(_depends_on_residual(a, ctx.bound) for a in stored_args),
            label_offset=label,
            helper_method=structural,
        )

    def structural_label(self, call: ast.Call) -> int | None:
        """For ``self.<m>(aux, i + k, ...)`` not named by the profile: the position of the
        label (an offset of the loop index) when a collector is also handed over; the
        helper's body is checked at resolution (:class:`flowtrace.model.facts.HelperDefFact`)."""
        func = call.func
        if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self"):
            return None
        args = [a.value for a in positional(call)]
        if not any(isinstance(a, ast.Name) and a.id in self.context.containers for a in args):
            return None
        labels = [n for n, a in enumerate(args) if offset_of(a, self.context.index) is not None]
        return labels[0] if len(labels) == 1 else None

    def append_site(self, call: ast.Call, tests: tuple, after: bool) -> F.CaptureSiteFact | None:
        """``aux.<record>(x)`` under a membership test of a capture attribute."""
        ctx = self.context
        method = last_name(call.func)
        if not isinstance(call.func, ast.Attribute):
            return None
        container = dotted(call.func.value) or ""
        if container not in ctx.containers:
            return None
        fixed_slots = container in self.built and self.sized_by(self.built[container]) is not None
        if method not in self.conv.container_methods and not (fixed_slots and len(arguments(call)) == 1):
            return None  # a fixed-slot collector records through whatever method it has
        attribute, label = None, None
        for test in tests:
            attribute = self.condition_attribute(test)
            if attribute is not None:
                label = self.condition_label(test, ctx.index)
                break
        if attribute is None:
            return None
        point = point_for(1 if after else 0, label) if label is not None else F.UNKNOWN
        mechanism = F.PACKER if self.is_packer(container) else F.APPEND
        captured, uses_residual, mutated, stream = self.stored_value(call, tests, after)
        return F.CaptureSiteFact(
            **ctx.base,
            location=self.file.loc(call),
            mechanism=mechanism,
            point=point,
            attribute=attribute,
            container=container,
            note=f"{container}.{method}(...) {'after' if after else 'before'} layer {ctx.index} runs, when {self.file.code(tests[-1])}",
            **self.reach(after),
            captured_expression=captured,
            uses_residual=uses_residual,
            mutated_later=mutated,
            label_offset=label,
            **stream,
            **self.slot_facts(container, ctx.loop),
        )

    def stored_value(self, call: ast.Call, tests: tuple, after: bool) -> tuple:
        """(recorded expression, depends on a residual, later in-place update, first-iteration
        stream facts) of ``aux.<record>(x)``, following ``x = h + r`` loop locals."""
        if not (call.args or call.keywords):
            return None, False, None, {}
        ctx = self.context
        stored = arguments(call)[0].value
        uses_residual = _depends_on_residual(stored, ctx.bound)
        name = stored.id if isinstance(stored, ast.Name) else None
        mutated = self.mutated_after(ctx.loop, name, start_of(call)) if name is not None else None
        stream = {} if after else self.first_iteration(call, stored, tests)
        if mutated is not None and name is not None:
            stream = {**stream, "mutated_at": self.file.loc(mutated), "mutated_rebound": rebinds(ctx.loop, name)}
        if name is not None and name in ctx.bound:
            stored = ctx.bound[name]  # `x = h + r; aux.append(x)`
        return self.file.code(stored), uses_residual, None if mutated is None else self.file.code(mutated), stream

    def first_iteration(self, call: ast.AST, stored: ast.expr, tests: tuple) -> dict[str, object]:
        """The operand that is None when this site runs at the loop's first index, if the
        recorded value combines it unguarded (the engine then raises a TypeError there)."""
        ctx = self.context
        candidates = set(ctx.none_at_entry) - rebound_unconditionally(ctx.loop, start_of(call)) - tested_names(tests)
        if not candidates:
            return {}
        name = unguarded_operand(stored, candidates, ctx.bound)
        if name is None:
            return {}
        at = ctx.bound[stored.id] if isinstance(stored, ast.Name) and stored.id in ctx.bound else call
        return {"first_none": name, "first_none_at": self.file.loc(ctx.none_at_entry[name].node), "stored_at": self.file.loc(at)}

    def mutated_after(self, loop: LoopNode, name: str, after: Position) -> ast.stmt | None:
        """An in-place update of ``name`` later in the loop body (``name += x``,
        ``name.add_(x)``): a stored reference would then change under the collector. One
        that follows an unconditional rebinding (``h, name = layer(h, name)``) updates the new
        object, never the stored one."""
        top = {id(s) for s in loop.body}
        for node in walk_statements(loop.body):
            if start_of(node) <= after:
                continue
            if id(node) in top and binds(node, name):
                return None
            if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
                return node
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute):
                func = node.value.func
                if isinstance(func.value, ast.Name) and func.value.id == name and func.attr.endswith("_") and not func.attr.startswith("_"):
                    return node
        return None

    def condition_attribute(self, test: ast.expr) -> str | None:
        """The capture attribute (or per-layer flag) a test checks, if it checks one."""
        for node in _attributes(test):
            if node in self.attrs:
                return node
        for name in spelled_names(test):
            if name in self.aliases:
                return self.aliases[name]  # `keep = frozenset(self.<attr>)`; `if i in keep`
        if isinstance(test, ast.Call) and last_name(test.func) in {"getattr", "hasattr"} and len(arguments(test)) >= 2:
            flag = string_value(arguments(test)[1].value)
            if flag is not None:
                return flag
        return None

    def condition_label(self, test: ast.expr, var: str) -> int | None:
        """k when the test is ``var + k in self.<attr>``; 0 for a per-layer flag. An ``and`` /
        ``or`` chain is read as binary operations nested to the left, ``((a and b) and c)``."""
        if isinstance(test, ast.Compare) and isinstance(test.ops[0], ast.In):
            return offset_of(test.left, var)
        if isinstance(test, ast.BoolOp):
            left = test.values[0] if len(test.values) == 2 else ast.BoolOp(op=test.op, values=test.values[:-1])
            return self.condition_label(left, var) if self.condition_attribute(left) else self.condition_label(test.values[-1], var)
        if isinstance(test, ast.Call):
            return 0
        return None

    def local_helper(self, call: ast.Call) -> bool:
        """``self.<m>(aux, 0, h, r)`` where ``m`` is a helper-shaped method of this class."""
        func = call.func
        if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self"):
            return False
        method = self.info.methods.get(func.attr)
        if method is None:
            return False
        from flowtrace.index.helpers import helper_definition

        return helper_definition(self.file, self.info, method) is not None

    def hands_collector(self, call: ast.Call, containers: dict[str, str]) -> bool:
        """``final_norm(h, ..., capture=aux.capture if L in self.<attr> else None)``: a
        collector handed to a call under a membership test records a state there."""
        for arg in arguments(call):
            value = arg.value
            if isinstance(value, ast.IfExp) and _is_none(value.orelse) and self.condition_attribute(value.test):
                carried = (dotted(value.body) or "").split(".")[0]
                if carried in containers:
                    return True
        return False

    def outside_captures(self, loop: LoopNode, statements: list, containers: dict[str, str]) -> tuple[bool, bool]:
        """Whether the forward also records a state before the loop (the embedding) or after it."""
        loop_start, loop_end = self.file.line(loop), end_of(loop)[0]
        pre = post = False
        self.post_at: F.Location | None = None
        nodes = _Nodes()
        nodes.walk(self.fn.body)
        for call, tests in nodes.calls:
            line = self.file.line(call)
            if loop_start <= line <= loop_end:
                continue
            method = last_name(call.func)
            records = any(h.name == method for h in self.conv.helpers) or (
                method in self.conv.container_methods
                and isinstance(call.func, ast.Attribute)
                and (dotted(call.func.value) or "") in containers
                and any(self.condition_attribute(t) for t in tests)
            ) or self.hands_collector(call, containers) or self.local_helper(call)
            if records:
                pre |= line < loop_start
                post |= line > loop_end
                if line > loop_end and self.post_at is None:
                    self.post_at = self.file.loc(call)
        return pre, post


def _assignments(statements: list, tests: tuple) -> list[tuple[ast.Assign, tuple]]:
    """Assignments of a block with the tests of the ``if``s around them (not into loops)."""
    out: list[tuple[ast.Assign, tuple]] = []
    for stmt in statements:
        if isinstance(stmt, ast.Assign):
            out.append((stmt, tests))
        elif isinstance(stmt, ast.If):
            out += _assignments(stmt.body, tests + (stmt.test,))
        elif isinstance(stmt, _UNCONDITIONAL_BLOCKS):
            out += _assignments(stmt.body, tests)
    return out


def _attributes(node: ast.AST) -> list[str]:
    return [n.attr for n in iter_nodes(node) if type(n) is ast.Attribute]


def _element(node: ast.expr) -> ast.expr:
    """A tuple element as libcst's ``element.value``: a starred one's value."""
    return node.value if isinstance(node, ast.Starred) else node


def _depends_on_residual(expr: ast.expr, bound: dict[str, ast.expr], depth: int = 0) -> bool:
    """Whether a stored value mentions a residual, directly or through loop-local assignments."""
    names = spelled_names(expr)
    if any("residual" in n for n in names):
        return True
    return depth < 4 and any(_depends_on_residual(bound[n], bound, depth + 1) for n in names if n in bound)


def _is_none(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


__all__ = ["LoopAnalyzer"]

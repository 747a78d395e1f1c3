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

from typing import TYPE_CHECKING

import libcst as cst

from flowtrace.model import facts as F
from dataclasses import dataclass, field

from flowtrace.index.streams import NoneAtEntry, binds, none_at_entry, rebinds, rebound_unconditionally, tested_names, unguarded_operand
from flowtrace.index.syntax import FastVisitor, body_statements, dotted, iter_nodes, last_name, names_in, walk_statements

if TYPE_CHECKING:
    from flowtrace.index.visitors import FileAnalyzer, _Class


# Calls that derive a collection from the capture attribute without changing its members.
_DERIVATIONS = {"set", "frozenset", "list", "tuple", "sorted"}


def offset_of(expr: cst.BaseExpression, var: str) -> int | None:
    """0 for ``var``, k for ``var + k`` / ``k + var``, -k for ``var - k``, else None."""
    if isinstance(expr, cst.Name) and expr.value == var:
        return 0
    if isinstance(expr, cst.BinaryOperation):
        left, right = expr.left, expr.right
        if isinstance(expr.operator, cst.Add):
            if isinstance(left, cst.Name) and left.value == var and isinstance(right, cst.Integer):
                return int(right.value)
            if isinstance(right, cst.Name) and right.value == var and isinstance(left, cst.Integer):
                return int(left.value)
        if isinstance(expr.operator, cst.Subtract) and isinstance(left, cst.Name) and left.value == var and isinstance(right, cst.Integer):
            return -int(right.value)
    return None


def point_for(boundary_offset: int, label_offset: int) -> str:
    diff = boundary_offset - label_offset
    return F.INPUT if diff == 0 else F.OUTPUT if diff == 1 else F.UNKNOWN


class _Nodes(FastVisitor):
    """Collects calls, if-expressions and if-statements below a node, with their ancestors' tests."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[cst.Call, tuple[cst.BaseExpression, ...]]] = []
        self.ifexps: list[cst.IfExp] = []
        self._tests: list[cst.BaseExpression] = []

    def visit_If(self, node: cst.If) -> None:
        self._tests.append(node.test)

    def leave_If(self, original_node: cst.If) -> None:
        self._tests.pop()

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append((node, tuple(self._tests)))

    def visit_IfExp(self, node: cst.IfExp) -> None:
        self.ifexps.append(node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False


@dataclass
class _LoopContext:
    """What the site finders of one layer loop share."""

    loop: cst.For
    layer_call: cst.Call
    index: str
    containers: dict[str, str]
    bound: dict[str, cst.BaseExpression]
    none_at_entry: dict[str, NoneAtEntry]
    pre: bool
    post: bool
    base: dict[str, object] = field(default_factory=dict)


class LoopAnalyzer:
    def __init__(self, file: FileAnalyzer, info: _Class, fn: cst.FunctionDef) -> None:
        self.file = file
        self.info = info
        self.fn = fn
        self.conv = file.conv
        self.function = f"{info.name}.{fn.name.value}"
        self.attrs = self.conv.attributes

    def facts(self) -> tuple[list[F.LayerLoopFact], list[F.CaptureSiteFact]]:
        statements = walk_statements(self.fn.body)
        loops = [s for s in statements if isinstance(s, cst.For)]
        if not loops:
            return [], []
        containers = self.containers(statements)
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
        self.built: dict[str, cst.Call] = {}
        for stmt in statements:
            value = None
            targets: list[cst.BaseExpression] = []
            if isinstance(stmt, cst.Assign):
                value, targets = stmt.value, [t.target for t in stmt.targets]
            elif isinstance(stmt, cst.AnnAssign) and stmt.value is not None:
                value, targets = stmt.value, [stmt.target]
            if value is None:
                continue
            kind = self.container_kind(value)
            if kind:
                for target in targets:
                    if isinstance(target, cst.Name):
                        out.setdefault(target.value, kind)
                        if isinstance(value, cst.Call):
                            self.built.setdefault(target.value, value)
        return out

    def attribute_aliases(self, statements: list) -> dict[str, str]:
        """Locals derived from a capture attribute (``s = frozenset(self.<attr>)``,
        ``wanted = self.<attr>``): a membership test of them is a test of the attribute."""
        out: dict[str, str] = {}
        for stmt in statements:
            if isinstance(stmt, cst.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0].target, cst.Name):
                value = stmt.value
                if isinstance(value, cst.Call) and last_name(value.func) in _DERIVATIONS and len(value.args) == 1:
                    value = value.args[0].value
                if isinstance(value, cst.Attribute) and value.attr.value in self.attrs:
                    out[stmt.targets[0].target.value] = value.attr.value
        return out

    def objects_built_from_attribute(self, statements: list) -> dict[str, tuple[cst.Call, str]]:
        """Locals built as ``Cls(..., self.<attr>, ...)`` (a metadata object carrying the
        capture indices): handed to each layer, the layer itself may record through it."""
        out: dict[str, tuple[cst.Call, str]] = {}
        for stmt in statements:
            if not (isinstance(stmt, cst.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0].target, cst.Name)):
                continue
            call = stmt.value
            if not (isinstance(call, cst.Call) and (last_name(call.func) or "")[:1].isupper()):
                continue
            for arg in call.args:
                value = arg.value
                attribute = value.attr.value if isinstance(value, cst.Attribute) and value.attr.value in self.attrs else None
                attribute = attribute or (self.aliases.get(value.value) if isinstance(value, cst.Name) else None)
                if attribute:
                    out.setdefault(stmt.targets[0].target.value, (call, attribute))
                    break
        return out

    def container_kind(self, value: cst.BaseExpression) -> str | None:
        if isinstance(value, cst.List) and not value.elements:
            return "list"
        if isinstance(value, cst.Dict) and not value.elements:
            return "dict"
        if not isinstance(value, cst.Call):
            return None
        callee = last_name(value.func) or ""
        if callee in self.conv.containers or callee in self.conv.packers:
            return callee
        if callee == "for_batch" and isinstance(value.func, cst.Attribute):
            return last_name(value.func.value) or callee
        if any(h.name == callee for h in self.conv.helpers):
            return "list"
        if self.sized_by(value) is not None and callee[:1].isupper():
            return callee  # any class built with one slot per capture index
        return None

    def sized_by(self, call: cst.Call) -> str | None:
        """``len(self.<attr>)`` among a constructor's arguments: one slot per capture index."""
        for arg in call.args:
            value = arg.value
            if isinstance(value, cst.Call) and last_name(value.func) == "len" and value.args:
                inner = value.args[0].value
                if isinstance(inner, cst.Attribute) and inner.attr.value in self.attrs:
                    return self.file.code(value)
        return None

    def slot_facts(self, container: str | None, loop: cst.For) -> dict[str, object]:
        """Fixed-slot facts for a site's container: its class, what sizes it, and the
        method the forward calls on it after the loop (``aux.finalize()``)."""
        call = self.built.get(container or "")
        if call is None:
            return {}
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value == "for_batch":
            func = func.value
        name = dotted(func)
        out: dict[str, object] = {"container_class": self.file.resolve(name) if name else None, "container_sized_by": self.sized_by(call)}
        loop_end = self.file.positions[loop].end.line
        nodes = _Nodes()
        nodes.walk(self.fn.body)
        for method_call, _ in nodes.calls:
            f = method_call.func
            if (
                isinstance(f, cst.Attribute)
                and isinstance(f.value, cst.Name)
                and f.value.value == container
                and not method_call.args
                and self.file.positions[method_call].start.line > loop_end
            ):
                out["finalize_method"] = f.attr.value
                out["finalize_at"] = self.file.loc(method_call)
                out["empty_return_at"] = self.empty_return(container, loop_end, self.file.positions[method_call].start.line)
                break
        return out

    def empty_return(self, container: str, after: int, before: int) -> F.Location | None:
        """``if len(aux) == 0: return ...`` (or ``if not aux``) between the loop and the
        finalize call: an empty collector is then never finalized."""
        for stmt in walk_statements(self.fn.body):
            line = self.file.positions[stmt].start.line
            if isinstance(stmt, cst.If) and after < line < before and container in names_in(stmt.test):
                if any(isinstance(b, cst.Return) for b in body_statements(stmt.body)):
                    return self.file.loc(stmt)
        return None

    def loop_variables(self, loop: cst.For) -> tuple[str | None, str | None]:
        """(index variable, layer variable) of ``for i in ...`` / ``for i, layer in enumerate(...)``."""
        target = loop.target
        if isinstance(target, cst.Name):
            return target.value, None
        if isinstance(target, cst.Tuple) and len(target.elements) == 2:
            a, b = (e.value for e in target.elements)
            return (a.value if isinstance(a, cst.Name) else None, b.value if isinstance(b, cst.Name) else None)
        return None, None

    def layer_call(self, loop: cst.For) -> cst.Call | None:
        """The call that runs one decoder layer inside the loop, if this is a layer loop."""
        index, layer_var = self.loop_variables(loop)
        layer_names = {layer_var} if layer_var else set()
        iter_text = self.file.code(loop.iter)
        layers_attr = any(f"self.{a}" in iter_text for a in self.conv.layers_attributes)
        if not layer_var and layers_attr and index:
            layer_names.add(index)  # for layer in self.layers
        for stmt in walk_statements(loop.body):
            if isinstance(stmt, cst.Assign) and isinstance(stmt.value, cst.Subscript):
                if (dotted(stmt.value.value) or "").split(".")[-1] in self.conv.layers_attributes:
                    for t in stmt.targets:
                        if isinstance(t.target, cst.Name):
                            layer_names.add(t.target.value)
        nodes = _Nodes()
        nodes.walk(loop.body)
        for call, _ in nodes.calls:
            func = call.func
            if isinstance(func, cst.Name) and func.value in layer_names:
                return call
            if isinstance(func, cst.Subscript) and (dotted(func.value) or "").split(".")[-1] in self.conv.layers_attributes:
                return call
        return None

    # -- captures ---------------------------------------------------------------
    def captures(self, loop: cst.For, layer_call: cst.Call, containers: dict[str, str], statements: list) -> list[F.CaptureSiteFact]:
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
            none_at_entry=none_at_entry(self.fn, loop, statements, self.file.positions),
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
        pos = self.file.positions
        call_start, call_end = pos[layer_call].start, pos[layer_call].end
        for call, tests in nodes.calls:
            start = pos[call].start
            after = (start.line, start.column) > (call_end.line, call_end.column)
            before = (start.line, start.column) < (call_start.line, call_start.column)
            if not (after or before):
                continue
            site = self.helper_site(call, after) or self.append_site(call, tests, after)
            if site is not None:
                found.append(site)
        return found

    def splits_residual(self, loop: cst.For, layer_call: cst.Call) -> bool:
        for stmt in walk_statements(loop.body):
            if isinstance(stmt, cst.Assign) and stmt.value is layer_call:
                for t in stmt.targets:
                    if isinstance(t.target, (cst.Tuple, cst.List)) and any(
                        isinstance(e.value, cst.Name) and "residual" in e.value.value for e in t.target.elements
                    ):
                        return True
        return False

    def loop_locals(self, loop: cst.For) -> dict[str, cst.BaseExpression]:
        """Locals bound in the loop body: `cb = aux.capture if i in attr else None; layer(..., capture_output=cb)`."""
        bound: dict[str, cst.BaseExpression] = {}
        for stmt in walk_statements(loop.body):
            if isinstance(stmt, cst.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0].target, cst.Name):
                bound.setdefault(stmt.targets[0].target.value, stmt.value)
        return bound

    def callback_sites(self) -> list[F.CaptureSiteFact]:
        """A callback or collector handed to the layer call under a membership test."""
        ctx = self.context
        found: list[F.CaptureSiteFact] = []
        for arg in ctx.layer_call.args:
            value = arg.value
            if isinstance(value, cst.Name) and value.value in ctx.bound:
                value = ctx.bound[value.value]
            if not (isinstance(value, cst.IfExp) and _is_none(value.orelse)):
                continue
            attribute = self.condition_attribute(value.test)
            if attribute is None:
                continue
            carried = dotted(value.body) or self.file.code(value.body)
            container = carried.split(".")[0]
            mechanism = F.PACKER if self.is_packer(container) else F.CALLBACK
            keyword = arg.keyword.value if arg.keyword is not None else None
            note = (
                f"{carried} handed to layer {ctx.index} as {keyword}=; point decided in the layer's forward"
                if keyword
                else f"{carried} handed to layer {ctx.index} positionally; cannot follow it"
            )
            found.append(
                F.CaptureSiteFact(
                    **ctx.base,
                    location=self.file.loc(arg),
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
        for arg in ctx.layer_call.args:
            value = arg.value
            if arg.keyword is None or not isinstance(value, cst.Name) or value.value in ctx.bound or value.value not in self.hook_objects:
                continue
            call, attribute = self.hook_objects[value.value]
            cls = dotted(call.func)
            found.append(
                F.CaptureSiteFact(
                    **ctx.base,
                    location=self.file.loc(arg),
                    mechanism=F.Mechanism.HOOK,
                    point=F.UNKNOWN,
                    attribute=attribute,
                    container=value.value,
                    note=f"{value.value} = {self.file.code(call.func)}(...self.{attribute}...) handed to layer {ctx.index} as {arg.keyword.value}=; point decided where the layer's forward calls it",
                    embedding_capturable=None,
                    last_layer_capturable=None,
                    callback_parameter=arg.keyword.value,
                    container_class=self.file.resolve(cls) if cls else None,
                    label_offset=0,  # the layer passes its own index
                )
            )
        return found

    def dict_sites(self) -> list[F.CaptureSiteFact]:
        """``by_layer[i] = x`` under a membership test: a dict keyed by layer."""
        ctx = self.context
        pos = self.file.positions
        call_start = pos[ctx.layer_call].start
        found: list[F.CaptureSiteFact] = []
        for stmt, tests in _assignments(body_statements(ctx.loop.body), ()):
            target = stmt.targets[0].target if len(stmt.targets) == 1 else None
            if not (isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name) and ctx.containers.get(target.value.value) == "dict"):
                continue
            if len(target.slice) != 1 or not isinstance(target.slice[0].slice, cst.Index):
                continue
            label = offset_of(target.slice[0].slice.value, ctx.index)
            attribute = next((a for a in map(self.condition_attribute, tests) if a), None)
            if label is None or attribute is None:
                continue
            start = pos[stmt].start
            after = (start.line, start.column) > (call_start.line, call_start.column)
            container = target.value.value
            stream = {} if after else self.first_iteration(stmt, stmt.value, tests)
            found.append(
                F.CaptureSiteFact(
                    **ctx.base,
                    location=self.file.loc(stmt),
                    mechanism=F.Mechanism.DICT,
                    point=point_for(1 if after else 0, label),
                    attribute=attribute,
                    container=container,
                    note=f"{container}[{self.file.code(target.slice[0].slice.value)}] = ... {'after' if after else 'before'} layer {ctx.index} runs, when {self.file.code(tests[-1])}",
                    **self.reach(after),
                    captured_expression=self.file.code(stmt.value),
                    uses_residual=_depends_on_residual(stmt.value, ctx.bound),
                    label_offset=label,
                    concat_order=self.read_order(container),
                    **stream,
                )
            )
        return found

    def buffer_writes(self, calls: list) -> list[tuple[cst.CSTNode, cst.Subscript, cst.BaseExpression, tuple]]:
        """(statement or call, written slice, written value, tests around it) of the loop body's
        ``buf[...].copy_(x)`` calls and ``buf[...] = x`` assignments; a known local list or
        dict is left to the append and dict finders."""
        ctx = self.context
        out: list[tuple[cst.CSTNode, cst.Subscript, cst.BaseExpression, tuple]] = []
        for call, tests in calls:
            func = call.func
            if isinstance(func, cst.Attribute) and func.attr.value == "copy_" and isinstance(func.value, cst.Subscript) and call.args:
                out.append((call, func.value, call.args[0].value, tests))
        for stmt, tests in _assignments(body_statements(ctx.loop.body), ()):
            target = stmt.targets[0].target if len(stmt.targets) == 1 else None
            if isinstance(target, cst.Subscript):
                out.append((stmt, target, stmt.value, tests))
        return [w for w in out if dotted(w[1].value) is not None and (dotted(w[1].value) or "") not in ctx.containers]

    def buffer_sites(self, calls: list) -> list[F.CaptureSiteFact]:
        """``buf[k].copy_(x)`` / ``buf[:, k * H:(k + 1) * H] = x`` under a membership test of a
        capture attribute: the state is copied into a preallocated buffer. The point follows
        the test's label and the side of the layer call, as for an append; a copy is never a
        reference, so no later in-place update reaches it."""
        ctx = self.context
        pos = self.file.positions
        call_start = pos[ctx.layer_call].start
        found: list[F.CaptureSiteFact] = []
        for node, target, value, tests in self.buffer_writes(calls):
            test = next((t for t in reversed(tests) if self.condition_attribute(t) is not None), None)
            if test is None:
                continue
            attribute, label = self.condition_attribute(test), self.condition_label(test, ctx.index)
            start = pos[node].start
            after = (start.line, start.column) > (call_start.line, call_start.column)
            container = dotted(target.value) or ""
            stream = {} if after else self.first_iteration(node, value, tests)
            if isinstance(value, cst.Name) and value.value in ctx.bound:
                captured = self.file.code(ctx.bound[value.value])
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
        (``list(d.values())``) in insertion order, which is the loop's."""
        for node in iter_nodes(self.fn.body, into_functions=False):
            if isinstance(node, (cst.ListComp, cst.GeneratorExp)) and isinstance(node.for_in, cst.CompFor):
                element = node.elt
                reads = isinstance(element, cst.Subscript) and isinstance(element.value, cst.Name) and element.value.value == container
                if reads and self.condition_attribute(node.for_in.iter) is not None:
                    return F.ConcatOrder.CONFIG
        return F.ConcatOrder.LOOP

    def is_packer(self, container: str) -> bool:
        kind = self.context.containers.get(container)
        return kind in self.conv.packers or (container in self.built and self.sized_by(self.built[container]) is not None)

    def helper_site(self, call: cst.Call, after: bool) -> F.CaptureSiteFact | None:
        """``self.<helper>(aux, label, h, r)`` with the label an offset of the loop index."""
        ctx = self.context
        method = last_name(call.func)
        helper = next((h for h in self.conv.helpers if h.name == method), None)
        label_arg, structural = (helper.label_arg, None) if helper is not None else (self.structural_label(call), method)
        if label_arg is None or not isinstance(call.func, cst.Attribute) or len(call.args) <= label_arg:
            return None
        label = offset_of(call.args[label_arg].value, ctx.index)
        point = point_for(1 if after else 0, label) if label is not None else F.UNKNOWN
        stored_args = [a.value for a in call.args[label_arg + 1 :][:2] if not _is_none(a.value)]
        return F.CaptureSiteFact(
            **ctx.base,
            location=self.file.loc(call),
            mechanism=F.HELPER,
            point=point,
            attribute=None,
            container=self.file.code(call.args[0].value) if call.args else None,
            note=f"{method} labels the stream {'after' if after else 'before'} layer {ctx.index} as {self.file.code(call.args[label_arg].value)}",
            # recorded before layer idx: boundaries from 0; after it: up to L
            **self.reach(after),
            captured_expression=" + ".join(self.file.code(a) for a in stored_args),
            uses_residual=any(_depends_on_residual(a, ctx.bound) for a in stored_args),
            label_offset=label,
            helper_method=structural,
        )

    def structural_label(self, call: cst.Call) -> int | None:
        """For ``self.<m>(aux, i + k, ...)`` not named by the profile: the position of the
        label (an offset of the loop index) when a collector is also handed over; the
        helper's body is checked at resolution (:class:`flowtrace.model.facts.HelperDefFact`)."""
        func = call.func
        if not (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self"):
            return None
        args = [a.value for a in call.args if a.keyword is None]
        if not any(isinstance(a, cst.Name) and a.value in self.context.containers for a in args):
            return None
        labels = [n for n, a in enumerate(args) if offset_of(a, self.context.index) is not None]
        return labels[0] if len(labels) == 1 else None

    def append_site(self, call: cst.Call, tests: tuple, after: bool) -> F.CaptureSiteFact | None:
        """``aux.<record>(x)`` under a membership test of a capture attribute."""
        ctx = self.context
        method = last_name(call.func)
        if not isinstance(call.func, cst.Attribute):
            return None
        container = dotted(call.func.value) or ""
        if container not in ctx.containers:
            return None
        fixed_slots = container in self.built and self.sized_by(self.built[container]) is not None
        if method not in self.conv.container_methods and not (fixed_slots and len(call.args) == 1):
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

    def stored_value(self, call: cst.Call, tests: tuple, after: bool) -> tuple:
        """(recorded expression, depends on a residual, later in-place update, first-iteration
        stream facts) of ``aux.<record>(x)``, following ``x = h + r`` loop locals."""
        if not call.args:
            return None, False, None, {}
        ctx = self.context
        stored = call.args[0].value
        uses_residual = _depends_on_residual(stored, ctx.bound)
        mutated = self.mutated_after(ctx.loop, stored.value, self.file.positions[call].start) if isinstance(stored, cst.Name) else None
        stream = {} if after else self.first_iteration(call, stored, tests)
        if mutated is not None:
            stream = {**stream, "mutated_at": self.file.loc(mutated), "mutated_rebound": rebinds(ctx.loop, stored.value)}
        if isinstance(stored, cst.Name) and stored.value in ctx.bound:
            stored = ctx.bound[stored.value]  # `x = h + r; aux.append(x)`
        return self.file.code(stored), uses_residual, None if mutated is None else self.file.code(mutated), stream

    def first_iteration(self, call: cst.CSTNode, stored: cst.BaseExpression, tests: tuple) -> dict[str, object]:
        """The operand that is None when this site runs at the loop's first index, if the
        recorded value combines it unguarded (the engine then raises a TypeError there)."""
        ctx = self.context
        pos = self.file.positions
        candidates = set(ctx.none_at_entry) - rebound_unconditionally(ctx.loop, pos[call].start, pos) - tested_names(tests)
        if not candidates:
            return {}
        name = unguarded_operand(stored, candidates, ctx.bound)
        if name is None:
            return {}
        at = ctx.bound.get(stored.value) if isinstance(stored, cst.Name) and stored.value in ctx.bound else call
        return {"first_none": name, "first_none_at": self.file.loc(ctx.none_at_entry[name].node), "stored_at": self.file.loc(at)}

    def mutated_after(self, loop: cst.For, name: str, after) -> cst.CSTNode | None:
        """An in-place update of ``name`` later in the loop body (``name += x``,
        ``name.add_(x)``): a stored reference would then change under the collector. One
        that follows an unconditional rebinding (``h, name = layer(h, name)``) updates the new
        object, never the stored one."""
        pos = self.file.positions
        top = {id(s) for s in body_statements(loop.body)}
        for node in walk_statements(loop.body):
            start = pos[node].start
            if (start.line, start.column) <= (after.line, after.column):
                continue
            if id(node) in top and binds(node, name):
                return None
            if isinstance(node, cst.AugAssign) and isinstance(node.target, cst.Name) and node.target.value == name:
                return node
            if isinstance(node, cst.Expr) and isinstance(node.value, cst.Call) and isinstance(node.value.func, cst.Attribute):
                func = node.value.func
                if isinstance(func.value, cst.Name) and func.value.value == name and func.attr.value.endswith("_") and not func.attr.value.startswith("_"):
                    return node
        return None

    def condition_attribute(self, test: cst.BaseExpression) -> str | None:
        """The capture attribute (or per-layer flag) a test checks, if it checks one."""
        for node in _attributes(test):
            if node in self.attrs:
                return node
        for name in names_in(test):
            if name in self.aliases:
                return self.aliases[name]  # `keep = frozenset(self.<attr>)`; `if i in keep`
        if isinstance(test, cst.Call) and last_name(test.func) in {"getattr", "hasattr"} and len(test.args) >= 2:
            flag = test.args[1].value
            if isinstance(flag, cst.SimpleString):
                return str(flag.evaluated_value)
        return None

    def condition_label(self, test: cst.BaseExpression, var: str) -> int | None:
        """k when the test is ``var + k in self.<attr>``; 0 for a per-layer flag."""
        if isinstance(test, cst.Comparison) and test.comparisons and isinstance(test.comparisons[0].operator, cst.In):
            return offset_of(test.left, var)
        if isinstance(test, cst.BooleanOperation):
            return self.condition_label(test.left, var) if self.condition_attribute(test.left) else self.condition_label(test.right, var)
        if isinstance(test, cst.Call):
            return 0
        return None

    def local_helper(self, call: cst.Call) -> bool:
        """``self.<m>(aux, 0, h, r)`` where ``m`` is a helper-shaped method of this class."""
        func = call.func
        if not (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self"):
            return False
        method = self.info.methods.get(func.attr.value)
        if method is None:
            return False
        from flowtrace.index.helpers import helper_definition

        return helper_definition(self.file, self.info, method) is not None

    def hands_collector(self, call: cst.Call, containers: dict[str, str]) -> bool:
        """``final_norm(h, ..., capture=aux.capture if L in self.<attr> else None)``: a
        collector handed to a call under a membership test records a state there."""
        for arg in call.args:
            value = arg.value
            if isinstance(value, cst.IfExp) and _is_none(value.orelse) and self.condition_attribute(value.test):
                carried = (dotted(value.body) or "").split(".")[0]
                if carried in containers:
                    return True
        return False

    def outside_captures(self, loop: cst.For, statements: list, containers: dict[str, str]) -> tuple[bool, bool]:
        """Whether the forward also records a state before the loop (the embedding) or after it."""
        pos = self.file.positions
        loop_start, loop_end = pos[loop].start.line, pos[loop].end.line
        pre = post = False
        self.post_at: F.Location | None = None
        nodes = _Nodes()
        nodes.walk(self.fn.body)
        for call, tests in nodes.calls:
            line = pos[call].start.line
            if loop_start <= line <= loop_end:
                continue
            method = last_name(call.func)
            records = any(h.name == method for h in self.conv.helpers) or (
                method in self.conv.container_methods
                and isinstance(call.func, cst.Attribute)
                and (dotted(call.func.value) or "") in containers
                and any(self.condition_attribute(t) for t in tests)
            ) or self.hands_collector(call, containers) or self.local_helper(call)
            if records:
                pre |= line < loop_start
                post |= line > loop_end
                if line > loop_end and self.post_at is None:
                    self.post_at = self.file.loc(call)
        return pre, post


def _assignments(statements: list, tests: tuple) -> list[tuple[cst.Assign, tuple]]:
    """Assignments of a block with the tests of the ``if``s around them (not into loops)."""
    out: list[tuple[cst.Assign, tuple]] = []
    for stmt in statements:
        if isinstance(stmt, cst.Assign):
            out.append((stmt, tests))
        elif isinstance(stmt, cst.If):
            out += _assignments(body_statements(stmt.body), tests + (stmt.test,))
        elif isinstance(stmt, (cst.With, cst.Try)):
            out += _assignments(body_statements(stmt.body), tests)
    return out


def _attributes(node: cst.CSTNode) -> list[str]:
    return [n.attr.value for n in iter_nodes(node) if type(n) is cst.Attribute]


def _depends_on_residual(expr: cst.BaseExpression, bound: dict[str, cst.BaseExpression], depth: int = 0) -> bool:
    """Whether a stored value mentions a residual, directly or through loop-local assignments."""
    names = names_in(expr)
    if any("residual" in n for n in names):
        return True
    return depth < 4 and any(_depends_on_residual(bound[n], bound, depth + 1) for n in names if n in bound)


def _is_none(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "None"


__all__ = ["LoopAnalyzer"]

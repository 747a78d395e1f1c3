"""Find the layer loops of a forward and hand each to the registered capture-site shapes.

A capture site is a layer loop that records a state when its index is in the capture
attribute. This module reads the loop's structure once (the layer call, the containers the
forward builds, aliases of the capture attribute, what is None at the first iteration, the
calls on either side of the layer call) into a frozen
:class:`flowtrace.index.sites.context.LoopContext`; each shape in :mod:`flowtrace.index.sites`
(append, callback, helper, buffer, dict, hook, ...) finds its own sites in it. Every shape is
recognised by its structure, never by a model name.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping

from flowtrace.index import sites
from flowtrace.index.context import ClassInfo, FileContext
from flowtrace.index.sites.context import (
    ForwardContext, LoopContext, LoopNode, Tests, calls_with_tests, collector_class, is_none, sized_by,
)
from flowtrace.index.streams import none_at_entry
from flowtrace.index.syntax import (
    FunctionNode,
    arguments,
    dotted,
    end_of,
    last_name,
    parameters,
    start_of,
    walk_statements,
)
from flowtrace.model import facts as F

# Calls that derive a collection from the capture attribute without changing its members.
_DERIVATIONS = {"set", "frozenset", "list", "tuple", "sorted"}
_LOOPS = (ast.For, ast.AsyncFor)


class LoopAnalyzer:
    """The layer loops of one method and the capture sites the shapes find in them."""

    def __init__(self, file: FileContext, info: ClassInfo, fn: FunctionNode) -> None:
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
        forward = self.forward(statements)
        loop_facts: list[F.LayerLoopFact] = []
        found: list[F.CaptureSiteFact] = []
        for loop in loops:
            calls = calls_with_tests(loop.body)  # read once: to find the layer call, then by the shapes
            layer_call = self.layer_call(loop, calls)
            if layer_call is None:
                continue
            ctx = self.loop_context(forward, loop, layer_call, statements, calls)
            loop_sites = sites.captures(ctx) if ctx is not None else []
            loop_facts.append(F.LayerLoopFact(self.info.qualname, self.function, self.file.loc(loop), bool(loop_sites)))
            found.extend(loop_sites)
        return loop_facts, found

    # -- the forward ---------------------------------------------------------------
    def forward(self, statements: list[ast.stmt]) -> ForwardContext:
        containers, built = self.containers(statements)
        containers.update(self.dict_parameters())
        aliases = self.attribute_aliases(statements)
        return ForwardContext(
            file=self.file,
            info=self.info,
            fn=self.fn,
            function=self.function,
            attributes=self.attrs,
            containers=containers,
            built=built,
            aliases=aliases,
            hook_objects=self.objects_built_from_attribute(statements, aliases),
        )

    def containers(self, statements: list[ast.stmt]) -> tuple[dict[str, str], dict[str, ast.Call]]:
        """Container variables and the class (or literal) they were built from, and the
        construction calls (for the fixed-slot facts)."""
        out: dict[str, str] = {}
        built: dict[str, ast.Call] = {}
        for stmt in statements:
            value, targets = _assigned(stmt)
            kind = self.container_kind(value) if value is not None else None
            if not kind:
                continue
            for target in targets:
                if isinstance(target, ast.Name):
                    out.setdefault(target.id, kind)
                    if isinstance(value, ast.Call):
                        built.setdefault(target.id, value)
        return out, built

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

    def attribute_aliases(self, statements: list[ast.stmt]) -> dict[str, str]:
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

    def objects_built_from_attribute(
        self, statements: list[ast.stmt], aliases: Mapping[str, str]
    ) -> dict[str, tuple[ast.Call, str]]:
        """Locals built as ``Cls(..., self.<attr>, ...)`` (a metadata object carrying the
        capture indices): handed to each layer, the layer itself may record through it."""
        out: dict[str, tuple[ast.Call, str]] = {}
        for stmt in statements:
            if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
                continue
            call = stmt.value
            if not (isinstance(call, ast.Call) and (last_name(call.func) or "")[:1].isupper()):
                continue
            attribute = self.carried_attribute(call, aliases)
            if attribute:
                out.setdefault(stmt.targets[0].id, (call, attribute))
        return out

    def carried_attribute(self, call: ast.Call, aliases: Mapping[str, str]) -> str | None:
        """The capture attribute (or an alias of it) a constructor is handed, first one wins."""
        for arg in arguments(call):
            value = arg.value
            attribute = value.attr if isinstance(value, ast.Attribute) and value.attr in self.attrs else None
            attribute = attribute or (aliases.get(value.id) if isinstance(value, ast.Name) else None)
            if attribute:
                return attribute
        return None

    def container_kind(self, value: ast.expr) -> str | None:
        if isinstance(value, ast.IfExp) and is_none(value.orelse):
            return self.container_kind(value.body)  # `[] if capturing else None`
        if isinstance(value, ast.List) and not value.elts:
            return "list"
        if isinstance(value, ast.Dict) and not value.keys:
            return "dict"
        if not isinstance(value, ast.Call):
            return None
        callee = last_name(value.func) or ""
        if callee in self.conv.collectors:
            return callee
        if (owner := collector_class(value.func, self.conv)) is not None:
            return last_name(owner)
        if any(h.name == callee for h in self.conv.helpers):
            return "list"
        if sized_by(self.file, self.attrs, value) is not None and callee[:1].isupper():
            return callee  # any class built with one slot per capture index
        return None

    # -- the loop -------------------------------------------------------------------
    def loop_variables(self, loop: LoopNode) -> tuple[str | None, str | None]:
        """(index variable, layer variable) of ``for i in ...`` / ``for i, layer in enumerate(...)``."""
        target = loop.target
        if isinstance(target, ast.Name):
            return target.id, None
        if isinstance(target, ast.Tuple) and len(target.elts) == 2:
            a, b = (_element(e) for e in target.elts)
            return (a.id if isinstance(a, ast.Name) else None, b.id if isinstance(b, ast.Name) else None)
        return None, None

    def layer_names(self, loop: LoopNode) -> set[str]:
        """The names a layer is called by in the loop: the loop's layer variable, the index
        for ``for layer in self.layers``, and locals bound as ``layer = self.layers[i]``."""
        index, layer_var = self.loop_variables(loop)
        names = {layer_var} if layer_var else set()
        iter_text = self.file.code(loop.iter)
        if not layer_var and index and any(f"self.{a}" in iter_text for a in self.conv.layers_attributes):
            names.add(index)  # for layer in self.layers
        for stmt in walk_statements(loop.body):
            if (
                isinstance(stmt, ast.Assign)
                and isinstance(stmt.value, ast.Subscript)
                and self.names_layers(stmt.value.value)
            ):
                names.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
        return names

    def names_layers(self, node: ast.expr) -> bool:
        return (dotted(node) or "").split(".")[-1] in self.conv.layers_attributes

    def layer_call(self, loop: LoopNode, calls: list[tuple[ast.Call, Tests]]) -> ast.Call | None:
        """The call that runs one decoder layer inside the loop (``calls``: those of its body,
        see :func:`calls_with_tests`), if this is a layer loop."""
        names = self.layer_names(loop)
        for call, _ in calls:
            func = call.func
            if isinstance(func, ast.Name) and func.id in names:
                return call
            if isinstance(func, ast.Subscript) and self.names_layers(func.value):
                return call
            if isinstance(func, ast.Attribute) and func.attr == "forward" and _is_layer(func.value, names, self):
                return call  # `layer.forward(...)`: the layer's own forward, called by name
        return None

    def loop_context(
        self,
        forward: ForwardContext,
        loop: LoopNode,
        layer_call: ast.Call,
        statements: list[ast.stmt],
        body_calls: list[tuple[ast.Call, Tests]],
    ) -> LoopContext | None:
        """Everything the shapes share about one layer loop (None without an index variable)."""
        index, _ = self.loop_variables(loop)
        if index is None:
            return None
        pre, post, post_at = self.outside_captures(forward, loop)
        calls = tuple(body_calls)
        return LoopContext(
            forward=forward,
            loop=loop,
            layer_call=layer_call,
            index=index,
            bound=_loop_locals(loop),
            none_at_entry=none_at_entry(self.fn, loop, statements),
            pre=pre,
            post=post,
            post_at=post_at,
            split_residual=_splits_residual(loop, layer_call),
            calls=calls,
            side_calls=_side_calls(calls, layer_call),
        )

    def outside_captures(self, forward: ForwardContext, loop: LoopNode) -> tuple[bool, bool, F.Location | None]:
        """Whether the forward also records a state before the loop (the embedding) or after
        it, and where the first record after it is."""
        loop_start, loop_end = self.file.line(loop), end_of(loop)[0]
        pre = post = False
        post_at: F.Location | None = None
        for call, tests in calls_with_tests(self.fn.body):
            line = self.file.line(call)
            if loop_start <= line <= loop_end or not self.records(forward, call, tests):
                continue
            pre |= line < loop_start
            post |= line > loop_end
            if line > loop_end and post_at is None:
                post_at = self.file.loc(call)
        return pre, post, post_at

    def records(self, forward: ForwardContext, call: ast.Call, tests: Tests) -> bool:
        """Whether a call outside the loop records a state: a profile helper, a collector's
        record method under a membership test, a collector handed on under one, or a call of
        a helper-shaped method of the class."""
        method = last_name(call.func)
        if any(h.name == method for h in self.conv.helpers):
            return True
        if (
            method in self.conv.container_methods
            and isinstance(call.func, ast.Attribute)
            and (dotted(call.func.value) or "") in forward.containers
            and any(forward.condition_attribute(t) for t in tests)
        ):
            return True
        return forward.hands_collector(call) or forward.local_helper(call)


def _is_layer(node: ast.expr, names: set[str], loops: LoopAnalyzer) -> bool:
    """``node`` is one decoder layer: a name the loop calls a layer by, or ``self.<layers>[i]``."""
    if isinstance(node, ast.Name):
        return node.id in names
    return isinstance(node, ast.Subscript) and loops.names_layers(node.value)


def _assigned(stmt: ast.stmt) -> tuple[ast.expr | None, list[ast.expr]]:
    """(value, targets) of an assignment (an annotated one with a value), else (None, [])."""
    if isinstance(stmt, ast.Assign):
        return stmt.value, list(stmt.targets)
    if isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        return stmt.value, [stmt.target]
    return None, []


def _side_calls(
    calls: tuple[tuple[ast.Call, Tests], ...], layer_call: ast.Call
) -> tuple[tuple[int, ast.Call, Tests, bool], ...]:
    """The calls that start before or after the layer call (not inside it), each with its
    position among the loop's calls and whether it comes after."""
    call_start, call_end = start_of(layer_call), end_of(layer_call)
    out = []
    for n, (call, tests) in enumerate(calls):
        start = start_of(call)
        if start > call_end or start < call_start:
            out.append((n, call, tests, start > call_end))
    return tuple(out)


def _splits_residual(loop: LoopNode, layer_call: ast.Call) -> bool:
    """Whether the layer call's result is unpacked into a name that says residual."""
    for stmt in walk_statements(loop.body):
        if isinstance(stmt, ast.Assign) and stmt.value is layer_call:
            for t in stmt.targets:
                elements = [_element(e) for e in t.elts] if isinstance(t, (ast.Tuple, ast.List)) else []
                if any(isinstance(e, ast.Name) and "residual" in e.id for e in elements):
                    return True
    return False


def _loop_locals(loop: LoopNode) -> dict[str, ast.expr]:
    """Locals bound in the loop body: `cb = aux.capture if i in attr else None; layer(..., capture_output=cb)`."""
    bound: dict[str, ast.expr] = {}
    for stmt in walk_statements(loop.body):
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            bound.setdefault(stmt.targets[0].id, stmt.value)
    return bound


def _element(node: ast.expr) -> ast.expr:
    """A tuple element as libcst's ``element.value``: a starred one's value."""
    return node.value if isinstance(node, ast.Starred) else node


__all__ = ["LoopAnalyzer"]

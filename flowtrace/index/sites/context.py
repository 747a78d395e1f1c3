"""The frozen contexts the site shapes read: one per forward, one per layer loop.

Everything a shape needs about the function (its containers, aliases of the capture
attribute, objects built from it) and about the loop (the layer call, loop locals, which
names are None at the first iteration, the calls on either side of the layer call) is
computed once here by :class:`flowtrace.index.loops.LoopAnalyzer`, then shared by every
shape. A fact is assembled by :meth:`LoopContext.fact` from typed pieces, never from dicts.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from flowtrace.engines.profiles import Conventions
from flowtrace.index.context import ClassInfo, FileContext
from flowtrace.index.helpers import helper_definition
from flowtrace.index.index_guards import FirstIndex
from flowtrace.index.layer_dicts import ids_order_read
from flowtrace.index.streams import (
    NoneAtEntry,
    binds,
    rebinds,
    rebound_unconditionally,
    spelled_names,
    tested_names,
    unguarded_operand,
)
from flowtrace.index.syntax import (
    FunctionNode,
    Position,
    arguments,
    child_nodes,
    int_value,
    is_name,
    dotted,
    end_of,
    iter_nodes,
    keyword_args,
    last_name,
    parameter_names,
    positional,
    start_of,
    string_value,
    visit_each,
    walk_statements,
)
from flowtrace.model import facts as F

LoopNode = ast.For | ast.AsyncFor
Tests = tuple[ast.expr, ...]
# Blocks whose body runs whenever the statement does (as libcst's With and Try: ``async with``, not ``try/except*``).
_UNCONDITIONAL_BLOCKS = (ast.With, ast.AsyncWith, ast.Try)


@dataclass(frozen=True, slots=True)
class Reach:
    """The end boundaries a site can record: b=0 (the embedding) and b=L (the last layer)."""

    embedding: bool | None = None
    last_layer: bool | None = None


@dataclass(frozen=True, slots=True)
class FirstNone:
    """An operand that is None when the site runs at the loop's first index and is combined
    unguarded into the recorded value (the engine then raises there)."""

    name: str
    at: F.Location
    stored_at: F.Location


@dataclass(frozen=True, slots=True)
class Mutation:
    """An in-place update of the stored tensor later in the loop body."""

    text: str
    at: F.Location
    rebound: bool


@dataclass(frozen=True, slots=True)
class Slots:
    """Fixed-slot facts of a site's container: its class, what sizes it, and the method the
    forward calls on it after the loop (``aux.finalize()``)."""

    container_class: str | None = None
    sized_by: str | None = None
    finalize_method: str | None = None
    finalize_at: F.Location | None = None
    empty_return_at: F.Location | None = None


_NO_SLOTS = Slots()


@dataclass(frozen=True, slots=True)
class Stored:
    """What ``aux.<record>(x)`` records: the expression (loop locals followed), whether it
    depends on a residual, and its first-iteration and in-place-update facts."""

    expression: str | None
    uses_residual: bool
    first: FirstNone | None
    mutation: Mutation | None


@dataclass(frozen=True, slots=True)
class ForwardContext:
    """One forward that runs a layer loop, as every loop of it shares it."""

    file: FileContext
    info: ClassInfo
    fn: FunctionNode
    function: str
    attributes: frozenset[str]
    containers: Mapping[str, str]  # container variable -> the class (or literal) it was built from
    built: Mapping[str, ast.Call]  # container variable -> its construction call
    aliases: Mapping[str, str]  # local -> the capture attribute it derives from
    hook_objects: Mapping[str, tuple[ast.Call, str]]  # local -> (its construction, the attribute it carries)

    @property
    def conv(self) -> Conventions:
        return self.file.conv

    def condition_attribute(self, test: ast.expr) -> str | None:
        """The capture attribute (or per-layer flag) a test checks, if it checks one."""
        for node in iter_nodes(test):
            if type(node) is ast.Attribute and node.attr in self.attributes:
                return node.attr
        for name in spelled_names(test):
            if name in self.aliases:
                return self.aliases[name]  # `keep = frozenset(self.<attr>)`; `if i in keep`
        if isinstance(test, ast.Call) and last_name(test.func) in {"getattr", "hasattr"} and len(arguments(test)) >= 2:
            return string_value(arguments(test)[1].value)
        return None

    def condition_label(self, test: ast.expr, var: str) -> int | None:
        """k when the test is ``var + k in self.<attr>``; 0 for a per-layer flag. An ``and`` /
        ``or`` chain is read as binary operations nested to the left, ``((a and b) and c)``."""
        if isinstance(test, ast.Compare) and isinstance(test.ops[0], ast.In):
            return offset_of(test.left, var)
        if isinstance(test, ast.BoolOp):
            left = test.values[0] if len(test.values) == 2 else ast.BoolOp(op=test.op, values=test.values[:-1])
            return (
                self.condition_label(left, var)
                if self.condition_attribute(left)
                else self.condition_label(test.values[-1], var)
            )
        if isinstance(test, ast.Call):
            return 0
        return None

    def is_packer(self, container: str) -> bool:
        kind = self.containers.get(container)
        return kind in self.conv.packers or (
            container in self.built and sized_by(self.file, self.attributes, self.built[container]) is not None
        )

    def fixed_slots(self, container: str) -> bool:
        return container in self.built and sized_by(self.file, self.attributes, self.built[container]) is not None

    def slots(self, container: str | None, loop: LoopNode) -> Slots:
        """The fixed-slot facts of a site's container (none for a container not built here)."""
        call = self.built.get(container or "")
        if call is None:
            return Slots()
        name = dotted(collector_class(call.func, self.conv) or call.func)
        cls = self.file.resolve(name) if name else None
        size = sized_by(self.file, self.attributes, call)
        loop_end = end_of(loop)[0]
        for method_call in _calls(self.fn.body):
            f = method_call.func
            if (
                isinstance(f, ast.Attribute)
                and is_local(f.value, container)
                and not (method_call.args or method_call.keywords)
                and self.file.line(method_call) > loop_end
            ):
                empty = self.empty_return(container or "", loop_end, self.file.line(method_call))
                return Slots(cls, size, f.attr, self.file.loc(method_call), empty)
        return Slots(cls, size)

    def empty_return(self, container: str, after: int, before: int) -> F.Location | None:
        """``if len(aux) == 0: return ...`` (or ``if not aux``) between the loop and the
        finalize call: an empty collector is then never finalized."""
        for stmt in walk_statements(self.fn.body):
            line = self.file.line(stmt)
            if isinstance(stmt, ast.If) and after < line < before and container in spelled_names(stmt.test):
                if any(isinstance(b, ast.Return) for b in stmt.body):
                    return self.file.loc(stmt)
        return None

    def read_order(self, container: str) -> F.ConcatOrder:
        """``[d[i] for i in self.<attr> ...]`` reads a dict in config order; anything else
        (``list(d.values())``) in insertion order, which is the loop's. A dict handed in as a
        parameter is read where the caller (a method of the class) keeps it."""
        places = [(self.fn, container)] + self.handed_in_by(container)
        return (
            F.ConcatOrder.CONFIG
            if any(self.reads_in_config_order(fn, name) for fn, name in places)
            else F.ConcatOrder.LOOP
        )

    def reads_in_config_order(self, fn: FunctionNode, container: str) -> bool:
        comprehensions = iter_nodes(fn.body, into_functions=False)
        return any(ids_order_read(node, container, self.condition_attribute) is not None for node in comprehensions)

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
                if isinstance(node, ast.Call) and dotted(node.func) == f"self.{self.fn.name}":
                    value = _handed(node, parameter, position)
                    if isinstance(value, ast.Name):
                        out.append((method, value.id))
        return out

    def local_helper(self, call: ast.Call) -> bool:
        """``self.<m>(aux, 0, h, r)`` where ``m`` is a helper-shaped method of this class."""
        return self.local_helper_def(call) is not None

    def local_helper_def(self, call: ast.Call) -> F.HelperDefFact | None:
        """The helper definition of ``self.<m>(...)`` when ``m`` is a method of this class that
        records a state for the label it is handed (:func:`flowtrace.index.helpers.helper_definition`)."""
        func = call.func
        if not (isinstance(func, ast.Attribute) and is_local(func.value, "self")):
            return None
        method = self.info.methods.get(func.attr)
        return helper_definition(self.file, self.info, method) if method is not None else None

    def hands_collector(self, call: ast.Call) -> bool:
        """``final_norm(h, ..., capture=aux.capture if L in self.<attr> else None)``: a
        collector handed to a call under a membership test records a state there."""
        for arg in arguments(call):
            value = arg.value
            if isinstance(value, ast.IfExp) and is_none(value.orelse) and self.condition_attribute(value.test):
                if (dotted(value.body) or "").split(".")[0] in self.containers:
                    return True
        return False


@dataclass(frozen=True, slots=True)
class LoopContext:
    """One layer loop of a forward: what its site shapes share, computed once."""

    forward: ForwardContext
    loop: LoopNode
    layer_call: ast.Call
    index: str  # the loop's index variable
    bound: Mapping[str, ast.expr]  # locals bound in the loop body (first binding)
    none_at_entry: Mapping[str, NoneAtEntry]
    pre: bool  # the forward also records a state before the loop (the embedding)
    post: bool  # ... or after it (the last layer's output)
    post_at: F.Location | None
    split_residual: bool
    calls: tuple[tuple[ast.Call, Tests], ...]  # every call of the loop body with the if-tests around it
    # (position in calls, call, tests, after the layer call) for the calls before or after it
    side_calls: tuple[tuple[int, ast.Call, Tests, bool], ...]

    @property
    def file(self) -> FileContext:
        return self.forward.file

    def fact(
        self,
        node: ast.AST,
        mechanism: F.Mechanism,
        point: F.Point,
        attribute: str | None,
        container: str | None,
        note: str,
        *,
        reach: Reach,
        captured: str | None = None,
        callback_parameter: str | None = None,
        uses_residual: bool = False,
        label: int | None = None,
        first: FirstNone | None = None,
        mutation: Mutation | None = None,
        slots: Slots | None = None,
        concat_order: F.ConcatOrder = F.ConcatOrder.LOOP,
        helper_method: str | None = None,
    ) -> F.CaptureSiteFact:
        """A site of this loop: the loop's own fields plus what the shape found, each piece typed."""
        fwd, slots = self.forward, slots or _NO_SLOTS
        return F.CaptureSiteFact(
            class_qualname=fwd.info.qualname,
            function=fwd.function,
            location=self.file.loc(node),
            mechanism=mechanism,
            point=point,
            attribute=attribute,
            loop_range=" ".join(self.file.code(self.loop.iter).split()),
            loop_variable=self.index,
            container=container,
            note=note,
            embedding_capturable=reach.embedding,
            last_layer_capturable=reach.last_layer,
            captured_expression=captured,
            callback_parameter=callback_parameter,
            split_residual=self.split_residual,
            uses_residual=uses_residual,
            mutated_later=mutation.text if mutation else None,
            mutated_at=mutation.at if mutation else None,
            mutated_rebound=mutation.rebound if mutation else False,
            label_offset=label,
            first_none=first.name if first else None,
            first_none_at=first.at if first else None,
            stored_at=first.stored_at if first else None,
            container_class=slots.container_class,
            container_sized_by=slots.sized_by,
            finalize_method=slots.finalize_method,
            finalize_at=slots.finalize_at,
            empty_return_at=slots.empty_return_at,
            post_loop_at=self.post_at,
            helper_method=helper_method,
            concat_order=concat_order,
        )

    def layer_mark(self, test: ast.expr) -> str | None:
        """The per-layer flag ``test`` reads as an attribute of the layer the loop calls
        (``aux if layer.<mark> else None``, the layer called as ``layer(...)``): a setter marks
        the layers it is handed, so the mark stands for the layer's own index."""
        func = self.layer_call.func
        called = func.value if isinstance(func, ast.Attribute) else func
        if isinstance(test, ast.Attribute) and ast.dump(test.value) == ast.dump(called):
            return test.attr
        return None

    def reach(self, after: bool) -> Reach:
        """The end boundaries a loop site can record: b=0 only before layer i runs (or with a
        capture before the loop), b=L only after it (or with a capture after the loop)."""
        return Reach(bool(self.pre) or not after, bool(self.post) or after)

    def assignments(self) -> list[tuple[ast.Assign, Tests]]:
        """The loop body's assignments with the tests of the ``if``s around them."""
        return _assignments(self.loop.body, ())

    def first_iteration(self, node: ast.AST, stored: ast.expr, tests: Tests) -> FirstNone | None:
        """The operand that is None when this site runs at the loop's first index, if the
        recorded value combines it unguarded (the engine then raises a TypeError there)."""
        candidates = set(self.none_at_entry) - rebound_unconditionally(self.loop, start_of(node)) - tested_names(tests)
        if not candidates:
            return None
        name = unguarded_operand(stored, candidates, dict(self.bound))
        if name is None or FirstIndex(self.forward.fn, self.loop).unreachable(self.loop.body, node):
            return None  # nothing to raise, or a branch the first index never takes (index_guards)
        at = self.bound[stored.id] if isinstance(stored, ast.Name) and stored.id in self.bound else node
        return FirstNone(name, self.file.loc(self.none_at_entry[name].node), self.file.loc(at))

    def stored(self, call: ast.Call, tests: Tests, after: bool) -> Stored:
        """What ``aux.<record>(x)`` records, following ``x = h + r`` loop locals."""
        if not (call.args or call.keywords):
            return Stored(None, False, None, None)
        stored = arguments(call)[0].value
        uses_residual = depends_on_residual(stored, self.bound)
        name = stored.id if isinstance(stored, ast.Name) else None
        mutated = self.mutated_after(name, start_of(call)) if name is not None else None
        first = None if after else self.first_iteration(call, stored, tests)
        mutation = (
            Mutation(self.file.code(mutated), self.file.loc(mutated), rebinds(self.loop, name))
            if mutated is not None and name is not None
            else None
        )
        if name is not None and name in self.bound:
            stored = self.bound[name]  # `x = h + r; aux.append(x)`
        return Stored(self.file.code(stored), uses_residual, first, mutation)

    def mutated_after(self, name: str, after: Position) -> ast.stmt | None:
        """An in-place update of ``name`` later in the loop body (``name += x``,
        ``name.add_(x)``): a stored reference would then change under the collector. One
        that follows an unconditional rebinding (``h, name = layer(h, name)``) updates the new
        object, never the stored one."""
        top = {id(s) for s in self.loop.body}
        for node in walk_statements(self.loop.body):
            if start_of(node) <= after:
                continue
            if id(node) in top and binds(node, name):
                return None
            if _updates_in_place(node, name):
                return node
        return None

    def flagged_output(self, tests: Tests) -> tuple[str, str, int | None] | None:
        """(attribute, keyword, label) when a test is ``v is not None`` for a value the layer
        call returns and the call is handed ``kw=i + k in self.<attr>``: the layer returns the
        state only when flagged, so the None test stands for the membership test."""
        returned = self.layer_outputs()
        for test in tests:
            if not (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id in returned):
                continue
            if len(test.ops) != 1 or not isinstance(test.ops[0], ast.IsNot) or not is_none(test.comparators[0]):
                continue
            for arg in arguments(self.layer_call):
                value = arg.value
                if arg.keyword is None or not (isinstance(value, ast.Compare) and isinstance(value.ops[0], ast.In)):
                    continue
                attribute = self.forward.condition_attribute(value)
                if attribute is not None:
                    return attribute, arg.keyword, self.forward.condition_label(value, self.index)
        return None

    def layer_outputs(self) -> set[str]:
        """Names the loop binds from the layer call's result (``h, r, extra = layer(...)``)."""
        for stmt in walk_statements(self.loop.body):
            if isinstance(stmt, ast.Assign) and stmt.value is self.layer_call:
                return {n for t in stmt.targets for n in spelled_names(t)}
        return set()


def offset_of(expr: ast.expr, var: str) -> int | None:
    """0 for ``var``, k for ``var + k`` / ``k + var``, -k for ``var - k``, else None. In a loop
    over the layers themselves (``for layer in self.layers``) ``var.<id>`` is the layer's index."""
    if is_name(expr, var) or isinstance(expr, ast.Attribute) and is_name(expr.value, var):
        return 0
    if not isinstance(expr, ast.BinOp):
        return None
    left, right = expr.left, expr.right
    if isinstance(expr.op, ast.Add):
        if is_name(left, var) and (k := int_value(right)) is not None:
            return k
        if is_name(right, var) and (k := int_value(left)) is not None:
            return k
    if isinstance(expr.op, ast.Sub) and is_name(left, var) and (k := int_value(right)) is not None:
        return -k
    return None


def point_for(boundary_offset: int, label_offset: int) -> F.Point:
    diff = boundary_offset - label_offset
    return F.Point.INPUT if diff == 0 else F.Point.OUTPUT if diff == 1 else F.Point.UNKNOWN


def side_point(after: bool, label: int | None) -> F.Point:
    """The point of a site recorded before (``after`` False) or after the layer call under a
    test of ``i + label``; unknown without a label."""
    return point_for(1 if after else 0, label) if label is not None else F.Point.UNKNOWN


def collector_class(func: ast.expr, conv: Conventions) -> ast.expr | None:
    """The collector class a construction call's ``func`` is a classmethod of (``Packer`` of
    ``Packer.for_batch``), when it is one of the profile's containers or packers: such a
    collector is built by its own class, as if called directly."""
    if isinstance(func, ast.Attribute) and last_name(func.value) in conv.collectors:
        return func.value
    return None


def is_none(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is None



def sized_by(file: FileContext, attributes: frozenset[str], call: ast.Call) -> str | None:
    """``len(self.<attr>)`` among a constructor's arguments: one slot per capture index."""
    for arg in arguments(call):
        value = arg.value
        if isinstance(value, ast.Call) and last_name(value.func) == "len" and (value.args or value.keywords):
            inner = arguments(value)[0].value
            if isinstance(inner, ast.Attribute) and inner.attr in attributes:
                return file.code(value)
    return None


def is_local(node: ast.expr, name: str | None) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def depends_on_residual(expr: ast.expr, bound: Mapping[str, ast.expr], depth: int = 0) -> bool:
    """Whether a stored value mentions a residual, directly or through loop-local assignments."""
    names = spelled_names(expr)
    if any("residual" in n for n in names):
        return True
    return depth < 4 and any(depends_on_residual(bound[n], bound, depth + 1) for n in names if n in bound)


def _updates_in_place(node: ast.stmt, name: str) -> bool:
    """``name += x`` or ``name.add_(x)`` (a trailing-underscore method, not a private one)."""
    if isinstance(node, ast.AugAssign):
        return is_local(node.target, name)
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute):
        func = node.value.func
        return is_local(func.value, name) and func.attr.endswith("_") and not func.attr.startswith("_")
    return False


def _handed(call: ast.Call, parameter: str, position: int | None) -> ast.expr | None:
    """The value a call hands in as ``parameter`` (by keyword, else at ``position``)."""
    values = [a.value for a in positional(call)]
    named = keyword_args(call)
    return named.get(parameter) or (values[position] if position is not None and 0 <= position < len(values) else None)


def calls_with_tests(body: list[ast.stmt]) -> list[tuple[ast.Call, Tests]]:
    """The calls below a block with the tests of the ``if`` statements around each (an ``if``'s
    own test among them, for the calls in it), outside nested functions, in pre-order: the
    statements are followed here (an ``if`` holds its test while its children are read), the
    expressions between them walked by :func:`flowtrace.index.syntax.visit_each`."""
    calls: list[tuple[ast.Call, Tests]] = []
    tests: list[ast.expr] = []
    handlers: dict[type, Callable[[Any], None]] = {ast.Call: lambda node: calls.append((node, tuple(tests)))}
    _calls_below(list(body), tests, handlers)
    return calls


def _calls_below(nodes: list[ast.AST], tests: list[ast.expr], handlers: dict[type, Callable[[Any], None]]) -> None:
    """:func:`calls_with_tests`' walk (a module function: a nested one calling itself would be
    a reference cycle that keeps the calls it found, and their tree, for the cyclic collector)."""
    for node in nodes:
        kind = node.__class__
        if kind in _DEFINITIONS:
            continue
        if kind is ast.If:
            tests.append(node.test)  # type: ignore[attr-defined]  # kind is ast.If
        for child in child_nodes(node):
            if isinstance(child, _NESTING):
                _calls_below([child], tests, handlers)
            else:
                visit_each(child, handlers)
        if kind is ast.If:
            tests.pop()


_DEFINITIONS = frozenset({ast.FunctionDef, ast.AsyncFunctionDef})  # nested functions: not walked
_NESTING = (ast.stmt, ast.excepthandler, ast.match_case)  # what holds statements, or is one


def _calls(body: list[ast.stmt]) -> list[ast.Call]:
    return [call for call, _ in calls_with_tests(body)]


def _assignments(statements: list[ast.stmt], tests: Tests) -> list[tuple[ast.Assign, Tests]]:
    """Assignments of a block with the tests of the ``if``s around them (not into loops)."""
    out: list[tuple[ast.Assign, Tests]] = []
    for stmt in statements:
        if isinstance(stmt, ast.Assign):
            out.append((stmt, tests))
        elif isinstance(stmt, ast.If):
            out += _assignments(stmt.body, tests + (stmt.test,))
        elif isinstance(stmt, _UNCONDITIONAL_BLOCKS):
            out += _assignments(stmt.body, tests)
    return out


__all__ = [
    "FirstNone",
    "calls_with_tests",
    "collector_class",
    "is_none",
    "offset_of",
    "point_for",
    "side_point",
    "ForwardContext",
    "LoopContext",
    "Mutation",
    "Reach",
    "Slots",
    "Stored",
    "depends_on_residual",
    "is_local",
    "sized_by",
]

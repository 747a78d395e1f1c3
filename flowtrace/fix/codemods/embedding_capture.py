"""Fix 3 (FT009): record the embedding before the first layer when its id is requested.

The founding story: a DeepSeek-like model records each layer's *output* (index i yields
b = i + 1) and hands the draft's ids over unchanged, so the embedding id of the engine's draft
configs (-1, "output of layer -1") arrives as index -1, which no loop index equals: the draft
trained on [embedding, out 2, out 30] gets two states, not three. The engine's own convention
already says what -1 means after its setter: index -1 at an output-point loop is b = 0. The
patch records the stream the loop starts from, before the loop, under the same membership
test the loop uses::

    if -1 in self.layers_to_capture:
        aux_hidden_states.append(hidden_states if residual is None else hidden_states + residual)
    for i in range(...):

Only where the loop's shape allows: an append into a list the function builds before the
loop, a recorded expression made of names bound before the loop (a split residual that is
still None there is guarded as fix 1 does), a loop that records nothing at b = 0 today, and a
setter that maps the engine's embedding id to the index this loop's convention reads as b = 0
(-1 after the layer, 0 before it: an input-point loop testing ``i + 1``). A loop that already
records b = 0 is refused: there the setter's mapping is what to change (``compat --fix`` finds
the ids).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import libcst as cst
from libcst.metadata import CodeRange

from flowtrace.checks.targets import short
from flowtrace.fix.codemods.guard_residual import guarded
from flowtrace.fix.expect import PROBE_LAYERS, embedding_id, site_rows, traced
from flowtrace.fix.model import CannotFix, Expectation, Proposal
from flowtrace.fix.source import Sources, method, one_class, parse, positions, simple_name
from flowtrace.model import facts as F

if TYPE_CHECKING:
    from flowtrace.analysis.resolve import ModelRow
    from flowtrace.analysis.scan import ScanResult
    from flowtrace.checks.base import Finding

_LIST_SITES = (F.Mechanism.APPEND,)


def _names(node: cst.CSTNode) -> set[str]:
    found: set[str] = set()

    class _Names(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:
            found.add(n.value)

        def visit_Attribute(self, n: cst.Attribute) -> bool:
            n.value.visit(self)  # `self.x`: only the base is a name
            return False

        def visit_Arg(self, n: cst.Arg) -> bool:
            n.value.visit(self)  # `f(dim=1)`: the keyword is no name
            return False

    node.visit(_Names())
    return found


def _bound_before(fn: cst.FunctionDef, loop: cst.CSTNode) -> tuple[set[str], set[str]]:
    """(names bound by the function's top-level statements before ``loop`` or as parameters,
    the subset last bound to None there)."""
    bound = {p.name.value for p in (*fn.params.posonly_params, *fn.params.params, *fn.params.kwonly_params)}
    nones: set[str] = set()
    for stmt in _statements(fn):
        if stmt is loop:
            break
        for target, value in _assignments(stmt):
            bound.add(target)
            if isinstance(value, cst.Name) and value.value == "None":
                nones.add(target)
            else:
                nones.discard(target)
    return bound, nones


def _statements(fn: cst.FunctionDef) -> list[cst.CSTNode]:
    return list(fn.body.body) if isinstance(fn.body, cst.IndentedBlock) else []


def _assignments(stmt: cst.CSTNode) -> Iterator[tuple[str, cst.BaseExpression]]:
    """(name, value) pairs a statement binds, looking into ``if``/``else`` blocks."""
    if isinstance(stmt, cst.SimpleStatementLine):
        for small in stmt.body:
            if isinstance(small, cst.Assign):
                for t in small.targets:
                    yield from _targets(t.target, small.value)
            elif isinstance(small, cst.AnnAssign) and small.value is not None:
                yield from _targets(small.target, small.value)
    elif isinstance(stmt, cst.If):
        for block in (stmt.body, stmt.orelse.body if stmt.orelse is not None else None):
            if isinstance(block, cst.IndentedBlock):
                for s in block.body:
                    yield from _assignments(s)
            elif isinstance(block, cst.If):
                yield from _assignments(block)


def _targets(target: cst.BaseExpression, value: cst.BaseExpression) -> Iterator[tuple[str, cst.BaseExpression]]:
    if isinstance(target, cst.Name):
        yield target.value, value
    elif isinstance(target, (cst.Tuple, cst.List)):
        values = (
            value.elements
            if isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == len(target.elements)
            else None
        )
        for k, el in enumerate(target.elements):
            if isinstance(el.value, cst.Name):
                yield el.value.value, (values[k].value if values else cst.Name("_unknown"))


def _loop_of(fn: cst.FunctionDef, pos: dict[cst.CSTNode, CodeRange], line: int) -> cst.For:
    for stmt in _statements(fn):
        if isinstance(stmt, cst.For) and pos[stmt].start.line <= line <= pos[stmt].end.line:
            return stmt
    raise CannotFix("the capture is not in a layer loop at the top level of the forward")


def entry_stream(expression: str, bound: set[str], nones: set[str]) -> cst.BaseExpression:
    """The recorded expression as it reads before the loop (a None operand guarded)."""
    try:
        expr = cst.parse_expression(expression)
    except cst.ParserSyntaxError:
        raise CannotFix(f"cannot read the recorded expression `{expression}`") from None
    unbound = _names(expr) - bound
    if unbound:
        raise CannotFix(f"the recorded `{expression}` uses {', '.join(sorted(unbound))}, bound only inside the loop")
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add):
        none = next((n.value for n in (expr.right, expr.left) if isinstance(n, cst.Name) and n.value in nones), None)
        if none is not None:
            return guarded(expr, none, loose=True)
    return expr


class _InsertBefore(cst.CSTTransformer):
    def __init__(self, loop: cst.For, statement: cst.If) -> None:
        super().__init__()
        self.loop, self.statement = loop, statement

    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
        if self.loop not in original.body:
            return updated
        k = list(original.body).index(self.loop)
        body = list(updated.body)  # the loop keeps its own comment lines, below the new capture
        return updated.with_changes(body=[*body[:k], self.statement, *body[k:]])


def plan(result: ScanResult, finding: Finding, sources: Sources) -> Proposal:
    row = next((r for r in result.rows if r.qualname == finding.symbol), None)
    chain = row.chain if row is not None else None
    if row is None or chain is None or chain.site is None or chain.site.owner is None:
        raise CannotFix(f"{finding.symbol}: no resolved capture site")
    site, owner = chain.site, chain.site.owner
    emb = embedding_id(result)
    probe = traced_indices(result, row, emb)
    if probe is None:
        raise CannotFix(f"the setter's mapping of id {emb} cannot be evaluated")
    if site.point not in (F.INPUT, F.OUTPUT):
        raise CannotFix(f"the capture point is {site.point}: where the stream before the loop would land is unknown")
    offset = 0 if site.point == F.INPUT else 1  # index i yields b = i + offset
    if site.embedding_capturable:
        raise CannotFix(
            f"the loop already records b=0 (index {-offset}); the setter maps id {emb} to index {probe}: "
            "change the ids (`flowtrace compat --fix`) or the setter, not the loop"
        )
    if probe + offset != 0:
        raise CannotFix(
            f"the setter maps id {emb} to index {probe}, which this loop's convention makes b={probe + offset}, not the"
            " embedding"
        )
    if site.mechanism not in _LIST_SITES or not site.container or not site.attribute:
        raise CannotFix(f"the capture is a {site.mechanism} site, not an append into a list the forward builds")
    fact = next((s for ff in result.files for s in ff.capture_sites if s.location == site.location), None)
    if fact is None or not fact.captured_expression:
        raise CannotFix("the recorded expression is unknown")
    file = site.location.file
    wrapper = parse(sources.text(file), file)
    pos = positions(wrapper)
    cls = one_class(wrapper.module, simple_name(owner), site.location.line, pos, file)
    fn = method(cls, site.function.rsplit(".", 1)[-1])
    if fn is None:
        raise CannotFix(f"{short(site.owner)}.{site.function} not found by libcst")
    loop = _loop_of(fn, pos, site.location.line)
    bound, nones = _bound_before(fn, loop)
    if site.container not in bound:
        raise CannotFix(f"{site.container} is not built before the loop")
    stream = entry_stream(fact.captured_expression, bound, nones)
    test = cst.Comparison(
        cst.Integer(str(probe)) if probe >= 0 else cst.UnaryOperation(cst.Minus(), cst.Integer(str(-probe))),
        [cst.ComparisonTarget(cst.In(), cst.Attribute(cst.Name("self"), cst.Name(site.attribute)))],
    )
    append = cst.Expr(cst.Call(cst.Attribute(cst.Name(site.container), cst.Name("append")), [cst.Arg(stream)]))
    statement = cst.If(test=test, body=cst.IndentedBlock([cst.SimpleStatementLine([append])]))
    patched = wrapper.module.visit(_InsertBefore(loop, statement))
    rows = site_rows(result, owner) or [row]
    expect = tuple(Expectation(r.qualname, (emb,), PROBE_LAYERS, (0,)) for r in rows)
    return Proposal(
        rule=finding.rule,
        fingerprint=finding.fingerprint,
        symbol=finding.symbol,
        file=finding.file,
        line=finding.line,
        title=(
            f"record the embedding before {site.function}'s loop when index {probe} (id {emb} after the setter) is"
            " requested"
        ),
        edits=(sources.edit(file, patched.code),),
        expect=expect,
    )


def traced_indices(result: ScanResult, row: ModelRow, emb: int) -> int | None:
    """The holder index the setter makes of the embedding id."""
    t = traced(result, Expectation(row.qualname, (emb,), PROBE_LAYERS, ()))
    indices = t.capture_indices if t is not None else None
    return indices[0] if indices and len(indices) == 1 else None

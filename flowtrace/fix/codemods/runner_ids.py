"""Fix FT026: hand the draft's ids to the setter call the runner makes before graph capture.

The runner already holds the draft's ids: it hands them to the setter later, as
``self.model.set_x(self.<ids>)`` in its model runner. The call before capture sits in another
object (a graph runner holding the model runner as ``self.model_runner``) and calls
``self.model_runner.model.set_x()`` with nothing. The receivers say how one object reaches the
other (``self.model`` there, ``self.model_runner.model`` here: the model runner is
``self.model_runner``), so the same ids are ``self.model_runner.<ids>`` here. The codemod passes
exactly that, and nothing when the ids are not reachable that way (a local, a parameter).
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

import libcst as cst
from libcst.metadata import CodeRange

from flowtrace.analysis.serving import SetterCall, serving_plan
from flowtrace.analysis.trace import trace_row
from flowtrace.fix.model import CannotFix, Expectation, Proposal
from flowtrace.fix.source import Sources, parse, positions
from flowtrace.model.facts import Location, Outcome

if TYPE_CHECKING:
    from flowtrace.analysis.scan import ScanResult
    from flowtrace.checks.base import Finding

_PROBE_IDS = (1, 15, 28)
_PROBE_LAYERS = 32
_MAX_ROWS = 3


def _calls(result: ScanResult, where: Location) -> tuple[SetterCall, SetterCall]:
    """The no-ids call at ``where`` and the first call after it that hands the draft's ids."""
    for path in serving_plan(result.project.lookup).startup:
        for n, call in enumerate(path.calls):
            if call.step.location == where and call.default:
                later = next((c for c in path.calls[n + 1:] if not c.default), None)
                if later is not None:
                    return call, later
    raise CannotFix("no setter call with no ids, followed by one with the draft's ids, at the finding's line")


def reached_ids(call: SetterCall, later: SetterCall) -> str:
    """The draft's ids as the object making ``call`` reaches them (see the module doc)."""
    text = later.step.ids_text
    try:
        value = ast.parse(text, mode="eval").body
    except SyntaxError:
        raise CannotFix(f"cannot read the ids `{text}`") from None
    names = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
    if names != {"self"}:
        raise CannotFix(
            f"the ids `{text}` are not an attribute path of the runner object (they read"
            f" {', '.join(sorted(names - {'self'})) or 'nothing'})"
        )
    if call.function.rsplit(".", 1)[0] == later.function.rsplit(".", 1)[0]:
        return text  # the same object
    mine, theirs = call.step.receiver, later.step.receiver
    if not (theirs == "self" or theirs.startswith("self.")):
        raise CannotFix(f"the later call's receiver `{theirs}` is not reached from self")
    tail = theirs[len("self"):]
    if not mine.endswith(tail) or len(mine) == len(tail):
        raise CannotFix(f"`{mine}` does not reach the object that holds the ids (`{theirs}` there)")
    prefix = mine[: len(mine) - len(tail)]
    return prefix + text[len("self"):] if text.startswith("self") else text


class _AddArgument(cst.CSTTransformer):
    def __init__(self, method: str, line: int, value: cst.BaseExpression, pos: dict[cst.CSTNode, CodeRange]) -> None:
        super().__init__()
        self.method, self.line, self.value, self.pos = method, line, value, pos
        self.done = False

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        func = original.func
        if self.done or not isinstance(func, cst.Attribute) or func.attr.value != self.method or original.args:
            return updated
        if self.pos[original].start.line > self.line or self.pos[original].end.line < self.line:
            return updated
        self.done = True
        return updated.with_changes(args=[cst.Arg(self.value)])


def _expectations(result: ScanResult, call: SetterCall) -> tuple[Expectation, ...]:
    """Rows whose graphs the patch changes: they must serve the draft's ids in every phase, as
    prefill already does."""
    out = []
    for row in result.rows:
        if not row.registered or row.capture is None or row.chain is None or row.chain.site is None:
            continue
        traced = trace_row(result.project, row, list(_PROBE_IDS), _PROBE_LAYERS, None)
        if traced.outcome == Outcome.CAPTURES and traced.boundaries:
            out.append(Expectation(row.qualname, _PROBE_IDS, _PROBE_LAYERS, tuple(traced.boundaries), every_phase=True))
        if len(out) >= _MAX_ROWS:
            break
    return tuple(out)


def plan(result: ScanResult, finding: Finding, sources: Sources) -> Proposal:
    where = Location(finding.file, finding.line)
    call, later = _calls(result, where)
    ids = reached_ids(call, later)
    text = sources.text(where.file)
    wrapper = parse(text, where.file)
    transformer = _AddArgument(call.step.name, where.line, cst.parse_expression(ids), positions(wrapper))
    patched = wrapper.visit(transformer)
    if not transformer.done:
        raise CannotFix(f"no `{call.step.name}()` without arguments at {where}")
    return Proposal(
        rule=finding.rule,
        fingerprint=finding.fingerprint,
        symbol=finding.symbol,
        file=finding.file,
        line=finding.line,
        title=f"hand {call.step.name}() the draft's ids before graph capture: `{ids}` (as {later.step.location} does)",
        edits=(sources.edit(where.file, patched.code),),
        expect=_expectations(result, call),
    )


__all__ = ["plan", "reached_ids"]

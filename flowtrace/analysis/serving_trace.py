"""The serving path on concrete ids: what each phase of serving records for one row.

:mod:`flowtrace.analysis.serving` says which setter calls each phase is served with (prefill
runs eagerly with the ids held last; decode and verify batches replay graphs with the ids held
when they were captured; a weight reload may leave prefill on other ids); this module traces the
row's chain with each of those calls' ids (a setter that only turns marks on serves the union of
every call) and names the forward paths on which some batches raise
(:mod:`flowtrace.analysis.forward_paths`). trace, compat and the matrix read the result.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from flowtrace.analysis.forward_paths import skipping_paths
from flowtrace.analysis.resolve import ModelRow, Project
from flowtrace.analysis.serving import Phase, ids_for, phases, serving_plan
from flowtrace.analysis.trace import TraceResult, TraceStep, trace_row
from flowtrace.model import facts as F


@dataclass(frozen=True, slots=True)
class PhaseTrace:
    """One phase on concrete ids: the ids the model holds then, and what it records."""

    phase: str  # "prefill" | "graph replay" | "after a weight reload"
    words: str
    ids: tuple[int, ...] | None  # the ids of the call the phase holds (None: the model's default)
    outcome: F.Outcome
    boundaries: tuple[int, ...] | None
    reason: str | None
    at: F.Location | None  # the graph capture, or the last call
    calls: tuple[str, ...]  # the setter calls it holds, in words


@dataclass(frozen=True, slots=True)
class BatchPath:
    """Batches that take a forward path which runs layers without the capture."""

    batches: str  # "two-batch overlap batches"
    at: F.Location
    how: str
    raises_at: F.Location | None


def _combined(traces: list[TraceResult]) -> tuple[F.Outcome, tuple[int, ...] | None, str | None]:
    """One phase's answer from the traces of the calls it holds (more than one: marks that
    accumulate, so the loop records the union of their layers)."""
    for outcome in (F.Outcome.RAISES, F.Outcome.UNKNOWN, F.Outcome.REFUSES):
        hit = next((t for t in traces if t.outcome == outcome), None)
        if hit is not None:
            return outcome, None, hit.reason
    union = sorted({b for t in traces for b in (t.boundaries or ())})
    if not union:
        return F.Outcome.CAPTURES_NOTHING, (), traces[0].reason if traces else "graphs captured before any capture ids were set"
    return F.Outcome.CAPTURES, tuple(union), None


def _phase_trace(project: Project, row: ModelRow, phase: Phase, layer_ids: list[int] | None, num_layers: int,
                 hidden_size: int | None, target_config: dict | None, prefill: TraceResult) -> PhaseTrace:
    traces: list[TraceResult] = []
    held_ids: tuple[int, ...] | None = None
    for call in phase.calls:
        known, ids = ids_for(call, layer_ids)
        if not known:
            return PhaseTrace(phase.name, phase.words, None, F.Outcome.UNKNOWN, None, f"the runner hands `{call.step.ids_text}`, which flowtrace cannot evaluate", phase.at, tuple(c.words() for c in phase.calls))
        held_ids = tuple(ids) if ids is not None else None
        same = (ids == layer_ids) or (ids is None and layer_ids is None)
        traces.append(prefill if same else trace_row(project, row, ids, num_layers, hidden_size, target_config))
    outcome, boundaries, reason = _combined(traces)
    return PhaseTrace(phase.name, phase.words, held_ids, outcome, boundaries, reason, phase.at, tuple(c.words() for c in phase.calls))


def phase_traces(project: Project, row: ModelRow, layer_ids: list[int] | None, num_layers: int, hidden_size: int | None,
                 target_config: dict | None, prefill: TraceResult) -> tuple[PhaseTrace, ...]:
    """Every phase of the runner's representative start-up, traced (empty when the runner's
    start-up was not read, or the row has no setter chain)."""
    if row.capture is None or row.chain is None:
        return ()
    return tuple(_phase_trace(project, row, p, layer_ids, num_layers, hidden_size, target_config, prefill) for p in phases(project, row))


def batch_paths(project: Project, row: ModelRow) -> tuple[BatchPath, ...]:
    return tuple(BatchPath(p.batches(), p.run.location, p.how, p.raises_at) for p in skipping_paths(project, row))


def differs(phase: PhaseTrace, prefill: TraceResult) -> bool:
    """The phase serves something else than the trace of the draft's ids does."""
    return phase.outcome != prefill.outcome or tuple(phase.boundaries or ()) != tuple(prefill.boundaries or ())


def phase_words(phase: PhaseTrace, num_layers: int) -> str:
    """``decode and target-verify batches (graph replay): boundaries [2, 30, 58] (ids: default)``."""
    ids = "the model's default" if phase.ids is None else str(list(phase.ids))
    if phase.outcome == F.Outcome.CAPTURES:
        what = f"boundaries {list(phase.boundaries or ())}"
    elif phase.outcome == F.Outcome.CAPTURES_NOTHING:
        what = "nothing"
    else:
        what = f"{phase.outcome} ({phase.reason})" if phase.reason else str(phase.outcome)
    held = f"ids {ids}" if len(phase.calls) <= 1 else f"the union of {len(phase.calls)} calls' ids"
    return f"{phase.words}: {what}, with {held}"


def has_plan(project: Project) -> bool:
    return serving_plan(project).known


def _held_words(phase: Phase) -> str:
    """Which ids a phase holds, without concrete ids: the draft's, the model's default, the
    union of several calls' (marks that accumulate), or none (graphs captured before any)."""
    if not phase.calls:
        return "no ids (captured before any setter call)"
    if len(phase.calls) > 1:
        kinds = list(dict.fromkeys("the model's default" if c.default else "the draft's" for c in phase.calls))
        return f"the union of {' and '.join(kinds)} ids ({len(phase.calls)} calls)"
    call = phase.calls[0]
    if call.default:
        return "the model's default ids"
    if call.step.ids == F.RunnerIds.GIVEN:
        return "the draft's ids"
    return f"`{call.step.ids_text}`"


def row_serving(project: Project, row: ModelRow) -> dict | None:
    """The matrix's ``capture.serving``: which ids each phase of serving holds and the batches
    that raise on a path without the capture; None when neither is known for the row."""
    if row.capture is None or row.chain is None or not row.registered:
        return None  # the runner serves registered entries; an inner model is served through one
    found = phases(project, row)
    paths = batch_paths(project, row)
    if not found and not paths:
        return None
    return {
        "phases": [
            {"phase": p.name, "words": p.words, "ids": _held_words(p), "at": str(p.at) if p.at else None, "calls": [c.words() for c in p.calls]}
            for p in found
        ],
        "batch_paths": [{"batches": b.batches, "outcome": "raises", "at": str(b.at), "how": b.how} for b in paths],
    }


def trace_model(project: Project, row: ModelRow, layer_ids: list[int] | None, num_layers: int, hidden_size: int | None = None,
                target_config: dict | None = None) -> TraceResult:
    """The trace users see (``flowtrace trace``, compat, suggest, fix): the row's chain traced by
    the one tracer (:func:`flowtrace.analysis.trace.trace_row`, links 1-7), then the serving
    path's phases on top. ``target_config`` resolves holders built from the target's config."""
    return with_serving(project, row, trace_row(project, row, layer_ids, num_layers, hidden_size, target_config), layer_ids, target_config)


def with_serving(project: Project, row: ModelRow, result: TraceResult, layer_ids: list[int] | None, target_config: dict | None) -> TraceResult:
    """``result`` with the serving path's phases and batch paths, and a ``serving`` step for
    each phase that serves something else than the draft's ids do."""
    found = phase_traces(project, row, layer_ids, result.num_layers, result.hidden_size, target_config, result)
    paths = batch_paths(project, row) if row.capture is not None else ()
    if not found and not paths:
        return result
    steps = list(result.steps)
    for p in found:
        said = phase_words(p, result.num_layers) if differs(p, result) else f"{p.words}: the ids traced above"
        steps.append(TraceStep("serving", f"{said}; {'; '.join(p.calls)}", p.at))
    for b in paths:
        steps.append(TraceStep("serving", f"{b.batches}: {b.how}", b.at))
    return dataclasses.replace(result, steps=tuple(steps), phases=found, batch_paths=paths)


__all__ = ["BatchPath", "PhaseTrace", "batch_paths", "differs", "has_plan", "phase_traces", "phase_words", "row_serving", "trace_model", "with_serving"]

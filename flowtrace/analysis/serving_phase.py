"""The tracer's serving phase (link 8): what each phase of serving records for one row.

The row's link 8 (:class:`flowtrace.model.links.ServingLink`, resolved with its chain by
:mod:`flowtrace.analysis.serving`) says which setter calls each phase is served with (prefill
runs eagerly with the ids held last; decode and verify batches replay graphs with the ids held
when they were captured; a weight reload may leave prefill on other ids) and which forward
paths run layers without the capture. This phase traces the chain with each of those calls'
ids (a setter that only turns marks on serves the union of every call) through the tracer's
links 1-7, handed to it as ``retrace``, and names the batches that raise on a path without the
capture. :func:`flowtrace.analysis.trace.trace_row` runs it after the concat phase; it never
imports the tracer (the tracer imports it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from flowtrace.analysis.serving import ids_for
from flowtrace.model import facts as F
from flowtrace.model.links import PhaseLink, ServingLink

if TYPE_CHECKING:
    from flowtrace.analysis.resolve import ModelRow


class Traced(Protocol):
    """What this phase reads of a trace of links 1-7 (the tracer's Traced): typed here
    so the phase stays below the tracer that runs it."""

    @property
    def outcome(self) -> F.Outcome: ...
    @property
    def boundaries(self) -> tuple[int, ...] | None: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def num_layers(self) -> int: ...


Retrace = Callable[[list[int] | None], Traced]  # links 1-7 of the row on other ids


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


@dataclass(frozen=True, slots=True)
class ServingTrace:
    """What the serving phase adds to a trace: the phases, the batch paths, and one
    ``serving`` step (text, location) per phase and path."""

    phases: tuple[PhaseTrace, ...]
    batch_paths: tuple[BatchPath, ...]
    steps: tuple[tuple[str, F.Location | None], ...]


def _combined(traces: list[Traced]) -> tuple[F.Outcome, tuple[int, ...] | None, str | None]:
    """One phase's answer from the traces of the calls it holds (more than one: marks that
    accumulate, so the loop records the union of their layers)."""
    for outcome in (F.Outcome.RAISES, F.Outcome.UNKNOWN, F.Outcome.REFUSES, F.Outcome.CAPTURES_DELTAS):
        hit = next((t for t in traces if t.outcome == outcome), None)
        if hit is not None:
            return outcome, None, hit.reason
    union = sorted({b for t in traces for b in (t.boundaries or ())})
    if not union:
        return (
            F.Outcome.CAPTURES_NOTHING,
            (),
            traces[0].reason if traces else "graphs captured before any capture ids were set",
        )
    return F.Outcome.CAPTURES, tuple(union), None


def _phase_trace(phase: PhaseLink, layer_ids: list[int] | None, prefill: Traced, retrace: Retrace) -> PhaseTrace:
    traces: list[Traced] = []
    held_ids: tuple[int, ...] | None = None
    calls = tuple(c.words() for c in phase.calls)
    for call in phase.calls:
        known, ids = ids_for(call, layer_ids)
        if not known:
            why = f"the runner hands `{call.step.ids_text}`, which flowtrace cannot evaluate"
            return PhaseTrace(phase.name, phase.words, None, F.Outcome.UNKNOWN, None, why, phase.at, calls)
        held_ids = tuple(ids) if ids is not None else None
        same = (ids == layer_ids) or (ids is None and layer_ids is None)
        traces.append(prefill if same else retrace(ids))
    outcome, boundaries, reason = _combined(traces)
    return PhaseTrace(phase.name, phase.words, held_ids, outcome, boundaries, reason, phase.at, calls)


def batch_paths(link: ServingLink) -> tuple[BatchPath, ...]:
    """The batches whose forward path runs layers without the capture (link 8's paths)."""
    return tuple(BatchPath(p.batches(), p.run.location, p.how, p.raises_at) for p in link.skipping)


def differs(phase: PhaseTrace, prefill: Traced) -> bool:
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


def serving_phase(
    link: ServingLink, result: Traced, layer_ids: list[int] | None, retrace: Retrace
) -> ServingTrace | None:
    """Phase 8 on concrete ids: every phase of serving the link holds, traced (``result`` is
    the trace of the draft's ids as the runner hands them: prefill), and the batch paths;
    None when the link holds neither."""
    found = tuple(_phase_trace(p, layer_ids, result, retrace) for p in link.phases)
    paths = batch_paths(link)
    if not found and not paths:
        return None
    steps: list[tuple[str, F.Location | None]] = []
    for p in found:
        said = phase_words(p, result.num_layers) if differs(p, result) else f"{p.words}: the ids traced above"
        steps.append((f"{said}; {'; '.join(p.calls)}", p.at))
    steps += [(f"{b.batches}: {b.how}", b.at) for b in paths]
    return ServingTrace(found, paths, tuple(steps))


def _held_words(phase: PhaseLink) -> str:
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


def row_serving(row: ModelRow) -> dict[str, Any] | None:
    """The matrix's ``capture.serving``: which ids each phase of serving holds and the batches
    that raise on a path without the capture; None when neither is known for the row."""
    if row.capture is None or row.chain is None or not row.registered:
        return None  # the runner serves registered entries; an inner model is served through one
    link = row.chain.serving
    paths = batch_paths(link)
    if not link.phases and not paths:
        return None
    return {
        "phases": [
            {
                "phase": p.name,
                "words": p.words,
                "ids": _held_words(p),
                "at": str(p.at) if p.at else None,
                "calls": [c.words() for c in p.calls],
            }
            for p in link.phases
        ],
        "batch_paths": [{"batches": b.batches, "outcome": "raises", "at": str(b.at), "how": b.how} for b in paths],
    }


__all__ = [
    "BatchPath",
    "PhaseTrace",
    "ServingTrace",
    "batch_paths",
    "differs",
    "phase_words",
    "row_serving",
    "serving_phase",
]

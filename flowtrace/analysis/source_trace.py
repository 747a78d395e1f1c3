"""Trace a capture path that has no setter (see config_capture): the engine's own layout.

Config-attribute engines write the ids themselves (a config builder's expression, evaluated on
L), so the draft's ids are *ignored*: the trace says so and reports the engine's layout
whatever ``--layer-ids`` says. Metadata-hook engines take the ids from their serving config
(``--layer-ids`` stands for it), sorted, with defaults applied by the metadata class.
"""

from __future__ import annotations

import dataclasses

from flowtrace.analysis.config_capture import CAPTURES, IGNORED, SourceCapture
from flowtrace.analysis.trace import TraceResult, TraceStep, trace_row
from flowtrace.model import facts as F


def trace_model(project, row, layer_ids: list[int] | None, num_layers: int, hidden_size: int | None = None, target_config: dict | None = None) -> TraceResult:  # noqa: ANN001
    """The trace of any row (one tracer: :func:`flowtrace.analysis.trace.trace_row`) with the
    serving path's phases. ``target_config`` resolves holders built from the target's config."""
    return with_serving(project, row, trace_row(project, row, layer_ids, num_layers, hidden_size, target_config), layer_ids, target_config)


def with_serving(project, row, result: TraceResult, layer_ids: list[int] | None, target_config: dict | None) -> TraceResult:  # noqa: ANN001
    """``result`` with the serving path's phases and batch paths (analysis/serving_trace), and
    a ``serving`` step for each phase that serves something else than the draft's ids do."""
    from flowtrace.analysis.serving_trace import batch_paths, differs, phase_traces, phase_words

    phases = phase_traces(project, row, layer_ids, result.num_layers, result.hidden_size, target_config, result)
    paths = batch_paths(project, row) if row.capture is not None else ()
    if not phases and not paths:
        return result
    steps = list(result.steps)
    for p in phases:
        said = phase_words(p, result.num_layers) if differs(p, result) else f"{p.words}: the ids traced above"
        steps.append(TraceStep("serving", f"{said}; {'; '.join(p.calls)}", p.at))
    for b in paths:
        steps.append(TraceStep("serving", f"{b.batches}: {b.how}", b.at))
    return dataclasses.replace(result, steps=tuple(steps), phases=phases, batch_paths=paths)


def _at(location: F.Location | None) -> str:
    return f" [{location}]" if location is not None else ""


def source_notes(row, engine_ids, trained) -> list[str]:  # noqa: ANN001
    """What compat says about a setter-less row: why the draft's ids do not decide the layout."""
    src: SourceCapture = row.source
    if src.kind == "hook":
        notes = [f"the engine reads no layer ids from the draft: it captures its serving config's {src.key} (b = id + 1), "
                 f"or the defaults applied{_at(src.default.location if src.default else None)}"]
        if src.outcome != CAPTURES:
            return notes + [f"{src.outcome.replace('_', ' ')}: {src.reason}{_at(src.reason_location)}"]
        wanted = sorted(b - 1 for b in trained if b > 0)
        notes.append(f"to serve the trained layout set {src.key} = {{{', '.join(map(str, wanted))}}}")
        if 0 in trained:
            notes.append("the trained embedding (b=0) cannot be requested from this engine: its ids are b - 1 and -1 is the post-final-norm state")
        return notes
    given = f"the draft's ids {list(engine_ids)}" if engine_ids is not None else "the draft's ids"
    return [f"{given} are ignored (id transform {IGNORED}): {src.reason}{_at(src.reason_location)}; no draft config can change what it serves"]


"""What the runner hands the setter for a method other than the default: the runner's own step
before the model's chain.

A method may change the draft's ids on the way (vLLM adds 1 to a DFlash draft's
``target_layer_ids`` before it calls the EAGLE-3 setter: ``[methods.*] id_offset``) or compute
them when the draft names none (SGLang's DFlash runner calls ``build_target_layer_ids(L, n)``:
``default_function``, whose source the index keeps as an :class:`~flowtrace.model.facts.IdFunctionFact`
and the safe interpreter runs). The default method declares neither, so its traces are what
they always were.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from flowtrace.analysis.function_interpreter import run_function
from flowtrace.model.safe_eval import CannotEvaluate
from flowtrace.analysis.resolve import ModelRow, Project
from flowtrace.analysis.trace import TraceResult, TraceStep, trace_row
from flowtrace.engines.methods import DRAFT_LAYERS, LAYERS, SpecMethod
from flowtrace.model import facts as F


@dataclass(frozen=True, slots=True)
class RunnerIds:
    """The ids the setter receives, the runner's words for how, and where (None ids with a
    ``blocked`` reason: the runner's ids could not be computed)."""

    ids: list[int] | None
    words: str = ""
    at: F.Location | None = None
    blocked: str | None = None


def _function(project: Project, name: str) -> F.IdFunctionFact | None:
    return next((fn for ff in project.files for fn in ff.id_functions if fn.name == name), None)


def runner_ids(project: Project, ids: list[int] | None, num_layers: int, draft_layers: int | None = None) -> RunnerIds:
    """The setter's ids under the project's method (unchanged for the default method)."""
    method = project.conv.method
    if method is None or method.default:
        return RunnerIds(ids)
    if ids is not None:
        if not method.id_offset:
            return RunnerIds(ids)
        shifted = [i + method.id_offset for i in ids]
        return RunnerIds(
            shifted,
            f"the runner adds {method.id_offset} to the draft's {method.title} ids ({ids} -> {shifted}) before the"
            " setter sees them",
        )
    if not method.default_function:
        return RunnerIds(None)
    return _default_ids(project, method, num_layers, draft_layers)


def _default_ids(project: Project, method: SpecMethod, num_layers: int, draft_layers: int | None) -> RunnerIds:
    fn = _function(project, method.default_function)
    call = f"{method.default_function}({', '.join(method.default_arguments)})"
    if fn is None:
        return RunnerIds(
            None,
            blocked=f"without ids the runner computes {method.title}'s with {call}, which this tree does not define",
        )
    if DRAFT_LAYERS in method.default_arguments and draft_layers is None:
        return RunnerIds(
            None,
            at=fn.location,
            blocked=(
                f"without ids the runner computes {method.title}'s with {call} ({fn.location}): give the draft's layer"
                " count (--draft-layers) or its ids"
            ),
        )
    values = {LAYERS: num_layers, DRAFT_LAYERS: draft_layers}
    arguments = {p: values[w] for p, w in zip(fn.parameters, method.default_arguments)}
    try:
        run = run_function(fn.source, arguments, {})
    except CannotEvaluate as exc:
        return RunnerIds(None, at=fn.location, blocked=f"{call} could not be read ({exc})")
    got = run.returned
    if run.raised is not None:
        return RunnerIds(
            None,
            at=fn.location,
            blocked=f"{call} raises on L = {num_layers}, {draft_layers} draft layers: {run.raised}",
        )
    if not isinstance(got, (list, tuple)) or not all(type(v) is int for v in got):
        why = "; ".join(run.unevaluated) or "no list of ids"
        return RunnerIds(
            None,
            at=fn.location,
            blocked=(
                f"{call} on L = {num_layers}, {draft_layers} draft layers could not be evaluated ({why}): give the ids"
            ),
        )
    produced = list(got)
    words = f"the draft names no ids: the runner computes {method.title}'s with {call} = {produced}"
    return RunnerIds(produced, words, fn.location)


def trace_for_method(
    project: Project,
    row: ModelRow,
    layer_ids: list[int] | None,
    num_layers: int,
    hidden_size: int | None = None,
    target_config: dict[str, object] | None = None,
    *,
    draft_layers: int | None = None,
) -> TraceResult:
    """The trace users see (trace, compat): :func:`flowtrace.analysis.trace.trace_row` on the ids
    the runner hands the setter under the project's method, with the runner's step first when it
    changed them (the default method: ``trace_row`` itself)."""
    runner = runner_ids(project, layer_ids, num_layers, draft_layers)
    if runner.blocked is not None:
        step = TraceStep("config", runner.blocked, runner.at)
        return TraceResult(
            row.qualname,
            num_layers,
            None,
            None,
            None,
            (),
            (step,),
            (),
            hidden_size,
            F.Outcome.UNKNOWN,
            None,
            runner.blocked,
        )
    result = trace_row(project, row, runner.ids, num_layers, hidden_size, target_config)
    if not runner.words:
        return result
    given = tuple(layer_ids) if layer_ids is not None else None
    return dataclasses.replace(
        result, layer_ids=given, steps=(TraceStep("config", runner.words, runner.at), *result.steps)
    )


__all__ = ["RunnerIds", "runner_ids", "trace_for_method"]

"""Trace a capture path that has no setter (see config_capture): the engine's own layout.

Config-attribute engines write the ids themselves (a config builder's expression, evaluated on
L), so the draft's ids are *ignored*: the trace says so and reports the engine's layout
whatever ``--layer-ids`` says. Metadata-hook engines take the ids from their serving config
(``--layer-ids`` stands for it), sorted, with defaults applied by the metadata class.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Any

from flowtrace.analysis.config_capture import CAPTURES, CAPTURES_NOTHING, IGNORED, REFUSES, SourceCapture
from flowtrace.analysis.layer_ids import CannotEvaluate, evaluate, run_function
from flowtrace.analysis.trace import TraceResult, TraceStep, describe_boundary, trace_row
from flowtrace.model import facts as F

_COUNT = re.compile(r"num_(hidden_)?layers")


def _layer_names(expression: str, bindings: tuple[tuple[str, str], ...], num_layers: int) -> dict[str, object]:
    """Every dotted name in ``expression`` (or bound before it) that counts layers means L."""
    names: dict[str, object] = {}
    for name, value in bindings:
        if _COUNT.search(value):
            names[name] = num_layers
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError:
        return names
    for node in ast.walk(tree):
        if isinstance(node, (ast.Attribute, ast.Name)) and _COUNT.search(ast.unparse(node)):
            names.setdefault(ast.unparse(node), num_layers)
    return names


def _ids(value: object) -> tuple[int, ...] | None:
    if isinstance(value, (list, tuple, set, frozenset)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return tuple(sorted(value)) if isinstance(value, (set, frozenset)) else tuple(value)
    return None


def trace_model(project, row, layer_ids: list[int] | None, num_layers: int, hidden_size: int | None = None, target_config: dict | None = None) -> TraceResult:  # noqa: ANN001
    """The trace of any row: the setter path (trace.trace_row) or the setter-less one.
    ``target_config`` resolves holders built from the target's config (support conditional)."""
    if row.capture is None and row.source is not None:
        return trace_source(project, row, layer_ids, num_layers, hidden_size)
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


def trace_source(project, row, layer_ids: list[int] | None, num_layers: int, hidden_size: int | None = None) -> TraceResult:  # noqa: ANN001
    src: SourceCapture = row.source
    steps: list[TraceStep] = []
    problems: list[str] = []
    ending: dict[str, Any] = {}

    def done(indices=None, boundaries=None, dropped=(), extra_slots=0) -> TraceResult:
        if "outcome" in ending:
            outcome = ending["outcome"]
        elif boundaries:
            outcome = F.Outcome.CAPTURES
        elif boundaries is not None:
            outcome = F.Outcome.CAPTURES_NOTHING
        else:
            outcome = F.Outcome.UNKNOWN
        return TraceResult(
            row.qualname, num_layers, tuple(layer_ids) if layer_ids is not None else None, indices, boundaries, tuple(dropped), tuple(steps), tuple(problems), hidden_size,
            outcome=outcome, raises_at=ending.get("raises_at"), reason=("; ".join(problems) or None) if outcome != F.Outcome.CAPTURES else None,
            extra_slots=extra_slots,
        )

    if src.outcome == REFUSES:
        ending.update(outcome=F.Outcome.RAISES, raises_at=src.reason_location)
    elif src.outcome == CAPTURES_NOTHING:
        ending.update(outcome=F.Outcome.CAPTURES_NOTHING)

    if src.kind == "hook":
        indices = _hook_ids(src, layer_ids, num_layers, steps, problems)
    else:
        indices = _config_ids(src, layer_ids, num_layers, steps, problems)
    if indices is None:
        return done()
    holder = src.holder.rsplit(".", 1)[-1]
    if src.source is not None:
        steps.append(TraceStep("attribute", f"{holder}.{src.source.attribute} = {list(indices)}", src.source.location))
    site: Any = src.site  # CaptureSiteFact | DictCaptureFact | HookCallFact: each has a location
    if site is None or src.point == F.UNKNOWN:
        problems.append(f"capture point unknown: {src.point_note}")
        return done(indices)
    offset = 0 if src.point == F.INPUT else 1
    steps.append(TraceStep("point", f"capture point {src.point} ({src.mechanism}): index i yields boundary i{' + 1' if offset else ''} ({src.point_note})", site.location))
    return _boundaries(src, indices, offset, num_layers, hidden_size, steps, problems, done, project.conv.post_norm_ids, ending)


def _config_ids(src: SourceCapture, layer_ids, num_layers: int, steps: list[TraceStep], problems: list[str]) -> tuple[int, ...] | None:  # noqa: ANN001
    given = f"draft ids {list(layer_ids)}" if layer_ids is not None else "no draft ids"
    read = f"{src.holder.rsplit('.', 1)[-1]} reads {src.key} from the {'config' if src.kind == 'config' else 'build context'}"
    steps.append(TraceStep("config", f"{given}: {IGNORED} - {read}; the engine fills it itself, the draft's ids are never read; L = {num_layers}", src.location))
    if src.outcome != CAPTURES or src.write is None:
        problems.append(f"{src.outcome.replace('_', ' ')}: {src.reason}")
        steps.append(TraceStep("source", src.reason, src.reason_location))
        return None
    write = src.write
    owner = src.builder.class_qualname.rsplit(".", 1)[-1] if src.builder else "the engine"
    try:
        value = evaluate(write.expression, _layer_names(write.expression, write.bindings, num_layers))
    except CannotEvaluate as exc:
        problems.append(f"cannot evaluate {write.key} = {write.expression}: {exc}")
        return None
    ids = _ids(value)
    if ids is None:
        problems.append(f"{write.expression} is not a list of ints")
        return None
    gate = f" when {write.condition}" if write.condition else ""
    steps.append(TraceStep("builder", f"{owner}: {write.key} = {write.expression} -> {list(ids)}{gate}", write.location))
    return ids


def _hook_ids(src: SourceCapture, layer_ids, num_layers: int, steps: list[TraceStep], problems: list[str]) -> tuple[int, ...] | None:  # noqa: ANN001
    if src.outcome != CAPTURES:
        problems.append(f"{src.outcome.replace('_', ' ')}: {src.reason}")
        steps.append(TraceStep("source", src.reason, src.reason_location))
        return None
    if layer_ids is not None:
        ids = tuple(sorted(set(layer_ids)))
        steps.append(TraceStep("config", f"serving config {src.key} = {list(layer_ids)}: the engine stores them sorted -> {list(ids)}; L = {num_layers}"))
        return ids
    default = src.default
    if default is None:
        problems.append(f"no ids given and no metadata class applies defaults to {src.key}")
        return None
    attribute = default.attribute
    names = {"self.num_layers": num_layers, f"self.{attribute}": None, "self.is_draft_model": False, "self.is_mtp_eagle": False}
    run = run_function(default.source, {}, names)
    writes = [w for w in run.writes if w.target == f"self.{attribute}" and _ids(w.value) is not None]
    if run.raised or not writes:
        problems.append(f"{default.class_qualname.rsplit('.', 1)[-1]}.{default.method} gives no default for L = {num_layers}: {run.raised or '; '.join(run.unevaluated) or 'no write'}")
        return None
    ids = tuple(sorted(_ids(writes[0].value) or ()))
    steps.append(TraceStep("default", f"no {src.key} given: {default.class_qualname.rsplit('.', 1)[-1]}.{default.method} sets {attribute} = {writes[0].expression} -> {list(ids)} (sorted); L = {num_layers}", default.location))
    return ids


def _boundaries(src, indices, offset, num_layers, hidden_size, steps, problems, done, post_norm, ending):  # noqa: ANN001
    site = src.site
    dropped: list[tuple[int, str]] = []
    emb = bool(getattr(site, "embedding_capturable", False)) or (offset == 0 and src.mechanism == F.DICT_STORE)
    reachable = set(range(1, num_layers)) | ({0} if emb else set()) | ({num_layers} if offset == 1 else set())
    out: list[int] = []
    unwritten: list[int] = []  # hook engines: ids no layer matches, each still a buffer slot
    post = [i for i in indices if src.kind == "hook" and i in post_norm]
    first = getattr(site, "label_offset", None)
    none_operand = getattr(site, "first_none", None)
    for i in indices:
        b = i + offset
        if none_operand and first is not None and i == first:
            at = getattr(site, "stored_at", None) or site.location
            problems.append(f"raises: index {i} is met at the loop's first iteration, where {none_operand} is still None and is added unguarded (TypeError)")
            steps.append(TraceStep("point", f"index {i}: {getattr(site, 'captured_expression', None) or 'the stored value'} with {none_operand} = None raises TypeError", at))
            ending.update(outcome=F.Outcome.RAISES, raises_at=at)
            return done(indices)
        if i in post:
            dropped.append((i, f"id {i} is the post-final-norm state the CausalLM wrapper records; it fills a buffer slot (first in ascending id order, unless the metadata moves it) but is not a residual-stream boundary"))
        elif 0 <= i < num_layers and b in reachable:
            if src.concat_order == "config" or b not in out:
                out.append(b)
        elif src.mechanism == F.DICT_STORE:
            problems.append(f"raises: id {i} is never stored (no layer {i}), so {src.holder.rsplit('.', 1)[-1]}'s cat([by_layer[i] for i in ids]) raises KeyError")
            at = getattr(site, "concat", None) or site.location
            steps.append(TraceStep("concat", f"by_layer[{i}] does not exist: KeyError", at))
            ending.update(outcome=F.Outcome.RAISES, raises_at=at)
            return done(indices)
        elif src.kind == "hook":
            unwritten.append(i)
            dropped.append((i, f"id {i} matches no layer (0..{num_layers - 1}); it still takes a slot of the preallocated buffer, "
                               "which no layer writes: the draft reads uninitialised memory there and nothing raises"))
        elif b == 0:
            dropped.append((i, "the embedding (b=0) is not captured here"))
        else:
            dropped.append((i, f"index {i} is outside range(0, {num_layers})"))
    if unwritten:
        problems.append(f"ids {unwritten} match no layer but each takes a buffer slot the fc reads: uninitialised memory, no error")
    if src.concat_order != "config":
        out.sort()
    for i, why in dropped:
        steps.append(TraceStep("dropped", f"dropped id {i}: {why}", (src.post_norm_site if i in post else None) or site.location, i))
    order = {"config": "in config order (duplicates repeat)", "sorted": "in ascending id order (buffer slots)", "loop": "in loop order"}[src.concat_order]
    steps.append(TraceStep("boundaries", f"captured, {order}: " + ", ".join(describe_boundary(b, num_layers) for b in out) if out else "nothing is captured"))
    slots = len(out) + len(post) + len(unwritten)
    width = f"{slots} x {hidden_size} = {slots * hidden_size}" if hidden_size else f"{slots} x hidden_size"
    extra = (f" + {len(post)} post-final-norm slot" if post else "") + (f" + {len(unwritten)} unwritten slot(s) (uninitialised)" if unwritten else "")
    steps.append(TraceStep("concat", f"{len(out)} states{extra}; fc in_features = {width}", getattr(site, "concat", None)))
    return done(indices, tuple(out), dropped, len(post) + len(unwritten))


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


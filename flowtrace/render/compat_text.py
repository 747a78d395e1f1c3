"""compat's text output: readable on its own, one fact per line, the fix last.

The reader is an engineer with a slow draft and no time: the verdict and model first, then
the two layouts side by side (trained vs served, as boundaries with their meaning), then each
differing slot with the line of engine code that decides it, then "fix:" lines they can paste
into the draft config (or the code change needed).
"""

from __future__ import annotations

from collections.abc import Iterable

from flowtrace.analysis.compat import CompatResult
from flowtrace.analysis.suggest import outcome
from flowtrace.analysis.trace import TraceResult, describe_boundary
from flowtrace.render.compat_words import differences_text


def _layout(boundaries: Iterable[int], L: int) -> str:
    return ", ".join(describe_boundary(b, L) if b >= 0 else f"b={b} (not a boundary)" for b in boundaries) or "nothing"


def _fix_lines(result: CompatResult) -> list[str]:
    """One ``fix:`` per way out: the first verified ids for a key and config (other verified
    ids for the same place on one ``also:`` line), or why no ids can do it."""
    lines: list[str] = []
    offered: dict[tuple[str | None, str], list[list[int]]] = {}
    for s in result.suggestions:
        if s.ids is not None:
            place = (s.key, s.config)
            if place in offered:
                offered[place].append(list(s.ids))
                continue
            offered[place] = []
            lines.append(f"  fix: set {s.key or 'the ids'} = {list(s.ids)} in the {s.config} (weights unchanged)")
            lines.append(f"       re-traced: the engine then serves boundaries {list(s.served or ())}; {s.why}")
        elif s.blocked_by == "undecided":
            where = f" [{s.location}]" if s.location else ""
            lines.append(f"  fix: none suggested: the capture path could not be decided{where}")
        else:
            where = f" [{s.location}]" if s.location else ""
            lines.append(
                f"  fix: no ids can make this engine serve the trained layout ({s.blocked_by or 'capture chain'} link"
                f" blocks){where}"
            )
            lines.append(f"       {s.why}")
    for (key, config), others in offered.items():
        if others:
            lines.append(
                f"  also: {', '.join(str(ids) for ids in others)} under {key or 'the ids'} in the {config} serve the"
                " same layout (verified too)"
            )
    first = next((s for s in result.suggestions if s.ids is not None), None)
    if first is not None and first.config != "draft config":
        lines.append(
            f"  check: flowtrace trace PATH -m {result.architecture} -L {result.num_layers} --layer-ids"
            f" {','.join(map(str, first.ids or ()))} (the ids stand for the {first.config})"
        )
    elif first is not None:
        lines.append(
            f"  check: after setting the ids to {','.join(map(str, first.ids or ()))}, rerun compat with"
            f" --trained-boundaries {','.join(map(str, sorted(result.trained)))}: expect MATCH"
        )
    return lines


def _trained_from(result: CompatResult) -> str:
    """Where the trained layout comes from, in words that say what the numbers are."""
    if result.convention == "given":
        return "trained boundaries given by --trained-boundaries"
    if result.convention == "recorded":
        return "trained boundaries recorded by `compat --fix` under flowtrace.trained_boundaries"
    ids = list(result.draft_ids or ())
    if result.draft_ids_key is None:
        return f"no {result.convention} ids in the draft config: the {result.convention} default ids {ids}"
    return f"{result.convention} ids {ids}"


def compat_text(result: CompatResult) -> str:
    L = result.num_layers
    served = list(result.served) if result.served is not None else None
    engine_ids = list(result.engine_ids) if result.engine_ids is not None else "none (engine default)"
    trained_from = _trained_from(result)
    lines = [
        f"{result.verdict}: {result.architecture} -> {result.model} (L = {L}, hidden {result.hidden_size})",
        f"  trained on ({trained_from}): boundaries {list(result.trained)} = {_layout(sorted(result.trained), L)}",
        f"  engine reads {result.engine_key or 'no ids'} = {engine_ids}",
        "  engine serves: "
        + (
            f"boundaries {served} = {_layout(served, L)}"
            if served is not None and outcome(result.trace) != "captures_deltas"
            else _unserved(result.trace)
        ),
    ]
    if result.engine_default:
        lines.append(f"  default: {result.engine_default}")
        lines.append(f"           vs {result.training_default}")
    if result.method is not None:
        lines.insert(1, f"  method: {result.method} ({result.method_why})")
    lines += [f"  - {d}" for d in differences_text(result)]
    lines += [f"  warning: {w}" for w in result.warnings]
    lines += [f"  note: {n}" for n in result.notes]
    if result.no_fix:
        lines.append(f"  fix: none: {result.no_fix}")
    lines += _fix_lines(result)
    return "\n".join(lines) + "\n"


def _unserved(trace: TraceResult) -> str:
    """What reaches the draft when no boundary list does: layer outputs without the residual
    (a delta stream), or nothing (the outcome says why)."""
    slots = getattr(trace, "slots", ()) if outcome(trace) == "captures_deltas" else ()
    if slots:
        named = ", ".join(
            f"b={s.boundary}" if s.boundary is not None else f"layer {s.layer_value_of}'s output" for s in slots
        )
        return f"states that are no residual-stream boundary ({named}, without the residual)"
    return f"nothing ({outcome(trace)})"

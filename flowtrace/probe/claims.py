"""Static claims (``--expect`` / ``--expect-trace``) and the per-slot comparison with observations.

Torch-free on purpose: parsing a claim is a usage concern, and a malformed claim must fail with a
one-line error before the (possibly slow) target is built.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flowtrace.probe.errors import ProbeError
from flowtrace.probe.results import (
    CAPTURES,
    CAPTURES_DELTAS,
    HIDDEN_PART,
    CAPTURES_NOTHING,
    CONFIRMED,
    OUTCOMES,
    RAISES,
    INCONCLUSIVE,
    NOTHING_OBSERVED,
    OBSERVED,
    REFUTED,
    ChunkMatch,
    Claim,
    Observation,
    Raised,
    SlotVerdict,
    boundary_label,
    is_delta,
    layout_label,
)


def parse_boundary_list(text: str, what: str = "--expect") -> tuple[int, ...]:
    """``"0,3,31"`` -> (0, 3, 31). Boundaries are non-negative: b=0 is the embedding output."""
    parts = [p.strip() for p in text.replace(" ", ",").split(",") if p.strip()]
    if not parts:
        raise ProbeError(f"{what} is empty: give boundary indices like 0,3,31")
    out = []
    for p in parts:
        try:
            v = int(p)
        except ValueError:
            raise ProbeError(
                f"{what}: {p!r} is not an integer; give boundary indices like 0,3,31"
            ) from None
        if v < 0:
            raise ProbeError(
                f"{what}: boundary {v} is negative; boundaries count from 0 (the embedding "
                "output), so engine layer id -1 is boundary 0 and layer id i is boundary i+1"
            )
        out.append(v)
    return tuple(out)


def load_trace_claim(path: str) -> Claim:
    """Read ``"boundaries"`` (ints, capture order) and ``"model"`` from a flowtrace trace JSON."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ProbeError(f"--expect-trace: {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProbeError(f"--expect-trace: cannot read {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ProbeError(
            f"--expect-trace: {path} is not JSON ({exc.msg} at line {exc.lineno}); "
            "write it with `flowtrace trace --format json`"
        ) from None
    if not isinstance(data, dict) or "boundaries" not in data:
        raise ProbeError(
            f"--expect-trace: {path} has no top-level key \"boundaries\"; "
            "write it with `flowtrace trace --format json`"
        )
    outcome = _trace_outcome(data, path)
    raw = data["boundaries"]
    deltas: tuple[bool, ...] = ()
    if outcome == CAPTURES_DELTAS:
        raw, deltas = _delta_slots(data, path)
    elif outcome != CAPTURES and raw in (None, []):
        raw = []
    elif not isinstance(raw, list) or not raw or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in raw
    ):
        raise ProbeError(
            f"--expect-trace: key \"boundaries\" in {path} must be a non-empty list of "
            f"non-negative ints (boundary indices), got {raw!r}"
        )
    model = data.get("model")
    raises_at = data.get("raises_at")
    ids = data.get("layer_ids")
    return Claim(
        source=str(path),
        boundaries=tuple(raw),
        model=None if model is None else str(model),
        outcome=outcome,
        raises_at=str(raises_at) if raises_at else None,
        layer_ids=tuple(ids) if isinstance(ids, list) and all(isinstance(i, int) for i in ids) else None,
        deltas=deltas,
    )


def _delta_slots(data: dict[str, Any], path: str) -> tuple[list[int], tuple[bool, ...]]:
    """A ``captures_deltas`` trace's ``slots``: a boundary b, or ``layer_value_of`` k (what
    layer k returns first without the residual, which the run shows as the hidden part of the
    split value at b = k + 1)."""
    slots = data.get("slots")
    out: list[int] = []
    deltas: list[bool] = []
    for s in slots if isinstance(slots, list) else []:
        b, k = (s.get("boundary"), s.get("layer_value_of")) if isinstance(s, dict) else (None, None)
        if isinstance(b, int) and not isinstance(b, bool) and b >= 0:
            out.append(b)
            deltas.append(False)
        elif isinstance(k, int) and not isinstance(k, bool) and k >= 0:
            out.append(k + 1)
            deltas.append(True)
        else:
            out = []
            break
    if not out:
        raise ProbeError(
            f"--expect-trace: {path}: a captures_deltas trace needs a non-empty \"slots\" list "
            "(each a boundary or a layer_value_of); write it with `flowtrace trace --format json`"
        )
    return out, tuple(deltas)


def _trace_outcome(data: dict[str, Any], path: str) -> str:
    """The trace's ``outcome``; a trace written before outcomes existed claims ``captures``."""
    outcome = data.get("outcome")
    if outcome is None:
        return CAPTURES
    if outcome == "unknown":
        why = data.get("reason") or "; ".join(str(p) for p in data.get("problems") or []) or "no reason given"
        raise ProbeError(
            f"--expect-trace: {path}: the trace could not decide the outcome ({why}); "
            "there is no claim to check: give --expect B0,B1,... instead"
        )
    if outcome not in OUTCOMES:
        raise ProbeError(
            f"--expect-trace: {path}: outcome {outcome!r} is not one of {', '.join(OUTCOMES)}"
        )
    return str(outcome)


def check_range(boundaries: tuple[int, ...], num_layers: int, what: str) -> None:
    """A boundary past L cannot exist in this target: a usage error, not a refutation."""
    bad = [b for b in boundaries if b > num_layers]
    if bad:
        raise ProbeError(
            f"{what}: boundary {bad[0]} is out of range; the target has {num_layers} layers, "
            f"so boundaries are 0..{num_layers}"
        )


def compare(claim: Claim | None, observation: Observation | None) -> tuple[tuple[SlotVerdict, ...], str]:
    """Slot-by-slot verdicts and the overall one.

    Refuted needs value evidence (an exact/allclose match to another boundary, a partial view, or a
    different slot count); a cosine-only resemblance is never enough either way, because adjacent
    boundaries are strongly correlated.
    """
    if claim is None:
        return (), (OBSERVED if observation is not None else NOTHING_OBSERVED)
    if observation is None:
        slots = tuple(
            SlotVerdict(i, b, None, INCONCLUSIVE, "no aux hidden states were observed")
            for i, b in enumerate(claim.boundaries)
        )
        return slots, INCONCLUSIVE
    verdicts: list[SlotVerdict] = []
    n = max(len(claim.boundaries), len(observation.chunks))
    for i in range(n):
        exp = claim.boundaries[i] if i < len(claim.boundaries) else None
        ch = observation.chunks[i] if i < len(observation.chunks) else None
        if ch is None:
            verdicts.append(
                SlotVerdict(
                    i, exp, None, REFUTED,
                    f"the claim has {len(claim.boundaries)} aux slots but the engine fed "
                    f"{len(observation.chunks)}",
                )
            )
            continue
        if exp is None:
            verdicts.append(
                SlotVerdict(
                    i, None, ch.boundary, REFUTED,
                    f"the engine fed an extra slot ({boundary_label(ch.boundary)}, {ch.kind}) "
                    f"beyond the {len(claim.boundaries)} claimed",
                )
            )
            continue
        delta = i < len(claim.deltas) and claim.deltas[i]
        verdicts.append(_delta_verdict(i, exp, ch) if delta else _slot_verdict(i, exp, ch))
    kinds = {v.verdict for v in verdicts}
    if REFUTED in kinds:
        overall = REFUTED
    elif kinds == {CONFIRMED}:
        overall = CONFIRMED
    else:
        overall = INCONCLUSIVE
    return tuple(verdicts), overall


def _margin_text(ch: ChunkMatch) -> str:
    if ch.runner_up is None or ch.margin is None:
        return ""
    return f"; cosine margin {ch.margin:.3f} over runner-up {boundary_label(ch.runner_up)}"


def _slot_verdict(i: int, exp: int, ch: ChunkMatch) -> SlotVerdict:
    how = {"exact": "exact match: torch.equal", "allclose": "near-exact match: allclose"}
    if ch.confirmed and exp in ch.equal_boundaries:
        extra = ""
        if len(ch.equal_boundaries) > 1:
            extra = (
                "; note: the value is also equal to "
                + ", ".join(boundary_label(b) for b in ch.equal_boundaries if b != exp)
            )
        view = "" if ch.view == "stream" else f" ({ch.view})"
        return SlotVerdict(
            i, exp, exp, CONFIRMED,
            f"{how.get(ch.kind, ch.kind)} with {boundary_label(exp)}{view}{_margin_text(ch)}{extra}",
        )
    if ch.confirmed:
        return SlotVerdict(
            i, exp, ch.boundary, REFUTED,
            f"the engine feeds {boundary_label(ch.boundary)} ({how.get(ch.kind, ch.kind)}), "
            f"not {boundary_label(exp)}{_margin_text(ch)}",
        )
    if ch.kind in ("exact", "allclose"):
        # a partial view (hidden without residual, ...) matched exactly: a real defect
        return SlotVerdict(
            i, exp, ch.boundary, REFUTED,
            f"the engine feeds {boundary_label(ch.boundary)} {ch.view} "
            f"({how.get(ch.kind, ch.kind)}), not the residual stream at {boundary_label(exp)}",
        )
    if ch.kind == "cosine":
        closest = "the claimed boundary" if ch.boundary == exp else boundary_label(ch.boundary)
        return SlotVerdict(
            i, exp, ch.boundary, INCONCLUSIVE,
            f"no exact match; closest is {closest} by cosine {ch.cosine:.4f}{_margin_text(ch)} "
            "(cosine alone cannot confirm: adjacent boundaries are correlated)",
        )
    return SlotVerdict(i, exp, None, INCONCLUSIVE, f"chunk matches no boundary: {ch.note}")


def _delta_verdict(i: int, exp: int, ch: ChunkMatch) -> SlotVerdict:
    """A slot claimed to hold what layer exp - 1 returns first, without the residual: confirmed
    by an exact match with that hidden part, refuted by an exact match with anything else."""
    layer = f"layer {exp - 1}'s output without the residual"
    if is_delta(ch) and ch.boundary == exp:
        return SlotVerdict(
            i, exp, exp, CONFIRMED, f"{ch.kind} match with {layer} ({HIDDEN_PART} at {boundary_label(exp)})"
        )
    if ch.kind in ("exact", "allclose"):
        fed = boundary_label(ch.boundary) if ch.confirmed else f"{boundary_label(ch.boundary)} {ch.view}"
        return SlotVerdict(i, exp, ch.boundary, REFUTED, f"the engine feeds {fed}, not {layer}")
    return SlotVerdict(i, exp, None, INCONCLUSIVE, f"no exact match for {layer}: {ch.note or ch.kind}")


def frame_matches(raises_at: str, frame: str) -> bool:
    """Does "file:line" (or "file:a-b") name this "path:line" frame? Files match by path suffix,
    so a trace's tree-relative path names the absolute path the run saw."""
    where, _, lines = raises_at.rpartition(":")
    path, _, line = frame.rpartition(":")
    if not where or not path or not line.isdigit():
        return False
    lo, _, hi = lines.partition("-")
    if not lo.isdigit() or (hi and not hi.isdigit()):
        return False
    n = int(line)
    if not int(lo) <= n <= int(hi or lo):
        return False
    where, path = where.replace("\\", "/"), path.replace("\\", "/")
    return path == where or path.endswith("/" + where.lstrip("./"))


def compare_outcome(
    claim: Claim, raised: Raised | None, observation: Observation | None
) -> tuple[tuple[SlotVerdict, ...], str]:
    """Verdicts when the claim or the run is not "captures": a run that raised, or a claim that
    the engine raises or feeds nothing. Plain captures-vs-captures goes to :func:`compare`."""
    if claim.outcome == RAISES:
        return _judge_raises(claim, raised)
    if raised is not None:
        why = f"the run raised {raised.type}: {raised.message}" + (
            f" at {raised.frames[-1]}" if raised.frames else ""
        )
        return (SlotVerdict(0, None, None, REFUTED, f"the claim is {claim.outcome}, but {why}"),), REFUTED
    if claim.outcome == CAPTURES_NOTHING:
        if observation is None:
            return (
                SlotVerdict(0, None, None, CONFIRMED, "nothing reached the concat, the fc or the model output"),
            ), CONFIRMED
        return (
            SlotVerdict(
                0, None, observation.boundaries[0] if observation.chunks else None, REFUTED,
                f"the claim is captures_nothing, but {observation.source} fed "
                f"{layout_label(observation.boundaries)}",
            ),
        ), REFUTED
    return compare(claim, observation)


def _judge_raises(claim: Claim, raised: Raised | None) -> tuple[tuple[SlotVerdict, ...], str]:
    site = claim.raises_at or "(no site given)"
    if raised is None:
        return (
            SlotVerdict(0, None, None, REFUTED, f"the claim is that the run raises at {site}, but it ran through"),
        ), REFUTED
    what = f"{raised.type}: {raised.message}"
    if claim.raises_at is None:
        return (SlotVerdict(0, None, None, CONFIRMED, f"the run raised {what}"),), CONFIRMED
    hit = next((f for f in reversed(raised.frames) if frame_matches(claim.raises_at, f)), None)
    if hit is not None:
        return (SlotVerdict(0, None, None, CONFIRMED, f"the run raised {what} at {hit}"),), CONFIRMED
    last = raised.frames[-1] if raised.frames else "an unknown place"
    return (
        SlotVerdict(0, None, None, REFUTED, f"the run raised {what} at {last}, not at {site}"),
    ), REFUTED

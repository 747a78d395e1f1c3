"""Static claims (``--expect`` / ``--expect-trace``) and the per-slot comparison with observations.

Torch-free on purpose: parsing a claim is a usage concern, and a malformed claim must fail with a
one-line error before the (possibly slow) target is built.
"""

from __future__ import annotations

import json
from pathlib import Path

from flowtrace.probe.errors import ProbeError
from flowtrace.probe.results import (
    CONFIRMED,
    INCONCLUSIVE,
    NOTHING_OBSERVED,
    OBSERVED,
    REFUTED,
    Claim,
    Observation,
    SlotVerdict,
    boundary_label,
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
    raw = data["boundaries"]
    if not isinstance(raw, list) or not raw or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in raw
    ):
        raise ProbeError(
            f"--expect-trace: key \"boundaries\" in {path} must be a non-empty list of "
            f"non-negative ints (boundary indices), got {raw!r}"
        )
    model = data.get("model")
    return Claim(source=str(path), boundaries=tuple(raw), model=None if model is None else str(model))


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
        verdicts.append(_slot_verdict(i, exp, ch))
    kinds = {v.verdict for v in verdicts}
    if REFUTED in kinds:
        overall = REFUTED
    elif kinds == {CONFIRMED}:
        overall = CONFIRMED
    else:
        overall = INCONCLUSIVE
    return tuple(verdicts), overall


def _margin_text(ch) -> str:
    if ch.runner_up is None or ch.margin is None:
        return ""
    return f"; cosine margin {ch.margin:.3f} over runner-up {boundary_label(ch.runner_up)}"


def _slot_verdict(i: int, exp: int, ch) -> SlotVerdict:
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

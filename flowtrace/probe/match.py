"""Match an observed chunk to the recorded boundaries by value.

Order of evidence: exact equality (``torch.equal``), then near-exact (elementwise ``allclose``
within a few ulps of the lower-precision dtype), then cosine similarity. Adjacent boundaries of a
residual stream are strongly correlated (cosine often > 0.9), so a cosine match is only a hint:
we report the margin to the runner-up boundary and call a chunk *confirmed* only on an
exact/near-exact match with a faithful view of the stream.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from flowtrace.probe.boundaries import Tape, View
from flowtrace.probe.observed import RawObservation
from flowtrace.probe.results import ChunkMatch, Observation


@dataclass(frozen=True, slots=True)
class _Score:
    view: View
    exact: bool
    close: bool
    cosine: float
    max_abs_diff: float
    tail: bool


def _eps(*dtypes: torch.dtype) -> float:
    return max(torch.finfo(d).eps if d.is_floating_point else 0.0 for d in dtypes)


def _score(c: torch.Tensor, view: View, hidden: int) -> _Score | None:
    t = view.tensor.reshape(-1, hidden)
    tail = False
    if t.shape[0] != c.shape[0]:
        if c.shape[0] < t.shape[0]:
            # decode-style capture of the last tokens only
            t, tail = t[-c.shape[0]:], True
        else:
            return None
    if t.device != c.device:
        t = t.to(c.device)
    exact = bool(torch.equal(c, t)) if c.dtype == t.dtype else bool(torch.equal(c.double(), t.double()))
    c32, t32 = c.float(), t.float()
    diff = float((c32 - t32).abs().max()) if c.numel() else 0.0
    if exact:
        close = True
    else:
        eps = _eps(c.dtype, t.dtype)
        rms = float(t32.pow(2).mean().sqrt()) if t.numel() else 0.0
        close = bool(torch.allclose(c32, t32, rtol=2 * eps, atol=max(eps * rms, 1e-12)))
    cos = torch.nn.functional.cosine_similarity(c32, t32, dim=-1, eps=1e-12)
    return _Score(view, exact, close, float(cos.mean()), diff, tail)


def match_chunk(slot: int, chunk: torch.Tensor, tape: Tape) -> ChunkMatch:
    """Classify one ``[..., hidden]`` chunk against every view of the tape."""
    hidden = tape.hidden_size
    c = chunk.detach().reshape(-1, hidden)
    scores = [s for v in tape.all_views() if (s := _score(c, v, hidden)) is not None]
    if not scores:
        return ChunkMatch(
            slot, None, "", "none", False,
            note=f"no recorded boundary has {c.shape[0]} x {hidden} values",
        )
    # best cosine per boundary over views that stand for the stream
    best_cos: dict[int, float] = {}
    for s in scores:
        if s.view.confirms:
            b = s.view.boundary
            best_cos[b] = max(best_cos.get(b, -2.0), s.cosine)

    def runner_up(b: int | None) -> tuple[int | None, float | None]:
        others = [(cv, ob) for ob, cv in best_cos.items() if ob != b]
        if not others:
            return None, None
        cv, ob = max(others)
        return ob, cv

    chosen: _Score | None = None
    kind = ""
    equal: tuple[int, ...] = ()
    for level in ("exact", "close"):
        hits = [s for s in scores if s.view.confirms and getattr(s, level)]
        if hits:
            # stream views come first in the tape, so hits[0] prefers the plain stream
            chosen = hits[0]
            kind = "exact" if level == "exact" else "allclose"
            equal = tuple(sorted({s.view.boundary for s in hits}))
            break
    confirmed = chosen is not None
    if chosen is None:
        for level in ("exact", "close"):
            hits = [s for s in scores if not s.view.confirms and getattr(s, level)]
            if hits:
                chosen, kind = hits[0], ("exact" if level == "exact" else "allclose")
                break
    if chosen is None:
        cands = [s for s in scores if s.view.confirms] or scores
        chosen = max(cands, key=lambda s: s.cosine)
        kind = "cosine"
    b = chosen.view.boundary
    ru, ru_cos = runner_up(b)
    cos_b = best_cos.get(b, chosen.cosine)
    notes = []
    if len(equal) > 1:
        notes.append("equal to several boundaries: " + ", ".join(f"b={x}" for x in equal))
    if chosen.tail:
        notes.append("matched the last tokens of the boundary only")
    return ChunkMatch(
        slot=slot,
        boundary=b,
        view=chosen.view.label,
        kind=kind,
        confirmed=confirmed,
        equal_boundaries=equal,
        cosine=cos_b,
        runner_up=ru,
        runner_up_cosine=ru_cos,
        margin=None if ru_cos is None else cos_b - ru_cos,
        max_abs_diff=chosen.max_abs_diff,
        note="; ".join(notes),
    )


def match_observation(raw: RawObservation, tape: Tape) -> Observation:
    return Observation(
        raw.source, raw.kind, tuple(match_chunk(i, ch, tape) for i, ch in enumerate(raw.chunks))
    )


def pick_primary(observations: list[Observation]) -> int | None:
    """The observation that best stands for "what the draft gets".

    Most direct source first (fc input, then model output, then a concat call); within that,
    fully confirmed observations beat partially matched ones. Concat calls none of whose chunks
    match a boundary (the draft's own ``cat([embeds, hidden])``) are never primary.
    """
    rank = {"fc-input": 0, "model-output": 1, "concat": 2}
    useful = [
        (i, o)
        for i, o in enumerate(observations)
        if any(c.kind in ("exact", "allclose") for c in o.chunks)
        or (o.kind != "concat" and o.chunks)
    ]
    if not useful:
        return None
    best = min(useful, key=lambda io: (not io[1].all_confirmed, rank.get(io[1].kind, 9), io[0]))
    return best[0]

"""Rank candidate aux layouts by how well a trained draft predicts with them.

A draft was trained on one layout; fed that layout it agrees with the target far more often than
fed any other. So we run the target once, keep every boundary, and for each candidate layout run
the draft teacher-forced at step 0: position t gets ``aux(t)`` and the embedding of token t+1, and
the label is the target's own argmax at t+1. Candidates are the static claim, the draft config's
``eagle_aux_hidden_state_layer_ids``, the EAGLE default, and their near misses (off-by-one shifts,
embedding swapped in), because those are the mistakes engines actually make.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from flowtrace.probe.draft import Eagle3Draft
from flowtrace.probe.results import (
    CLEAR_WINNER,
    NO_CLEAR_WINNER,
    CandidateScore,
    layout_label,
)


@dataclass(frozen=True, slots=True)
class Candidate:
    boundaries: tuple[int, ...]
    sources: tuple[str, ...]


def eagle_default(num_layers: int) -> tuple[int, ...]:
    """EAGLE-3's default capture {2, L//2, L-3}, read as boundaries (inputs of those layers)."""
    return (2, num_layers // 2, num_layers - 3)


def _variants(base: tuple[int, ...]) -> list[tuple[tuple[int, ...], str]]:
    out: list[tuple[tuple[int, ...], str]] = []
    for d in (-1, 1):
        out.append((tuple(b + d for b in base), f"all slots {d:+d}"))
    for i in range(len(base)):
        for d in (-1, 1):
            v = list(base)
            v[i] += d
            out.append((tuple(v), f"slot {i} {d:+d}"))
    if 0 not in base and len(base) > 1:
        out.append(((0,) + base[1:], "embedding instead of slot 0"))
        out.append(((0,) + base[:-1], "embedding prepended, last slot dropped"))
    if 0 in base and len(base) > 1:
        rest = tuple(b for b in base if b != 0)
        out.append((rest + (rest[-1] + 1,), "without the embedding, next boundary appended"))
    return out


def candidate_layouts(
    named: Sequence[tuple[str, tuple[int, ...] | None]],
    num_layers: int,
    n_aux: int,
    exhaustive: bool = False,
) -> list[Candidate]:
    """Deduplicated candidates of size ``n_aux`` within 0..L, each with the reasons it is here."""
    sources: dict[tuple[int, ...], list[str]] = {}

    def add(layout: tuple[int, ...], why: str) -> None:
        if len(layout) != n_aux or any(b < 0 or b > num_layers for b in layout):
            return
        if len(set(layout)) != len(layout):
            return
        sources.setdefault(layout, [])
        if why not in sources[layout]:
            sources[layout].append(why)

    bases = [(name, tuple(lay)) for name, lay in named if lay]
    for name, lay in bases:
        add(lay, name)
    for name, lay in bases:
        for v, how in _variants(lay):
            if tuple(sorted(v)) == v or v == lay:
                add(v, f"{name}, {how}")
    if exhaustive:
        for combo in itertools.combinations(range(num_layers + 1), n_aux):
            add(combo, "exhaustive")
    return [Candidate(k, tuple(v)) for k, v in sources.items()]


@dataclass(slots=True)
class TeacherData:
    """Per sequence: boundary streams ``[L+1, T, H]`` and the target's argmax ``[T]``."""

    tokens: list[torch.Tensor]
    streams: list[torch.Tensor]
    argmax: list[torch.Tensor]

    @property
    def positions(self) -> int:
        return sum(max(int(t.shape[0]) - 1, 0) for t in self.tokens)

    def labels(self) -> torch.Tensor:
        return torch.cat([a[1:] for a in self.argmax]) if self.argmax else torch.zeros(0)


@torch.no_grad()
def score_layouts(
    draft: Eagle3Draft,
    data: TeacherData,
    candidates: Sequence[Candidate],
    progress: Callable[[str], None] | None = None,
) -> list[CandidateScore]:
    """Teacher-forced step-0 top-1 agreement for each candidate, ranked best first."""
    scores: list[CandidateScore] = []
    order = {c.boundaries: i for i, c in enumerate(candidates)}
    for ci, cand in enumerate(candidates):
        if progress and (ci % 10 == 0 or ci == len(candidates) - 1):
            progress(f"scoring layout {ci + 1}/{len(candidates)} {layout_label(cand.boundaries)}")
        correct = total = 0
        idx = list(cand.boundaries)
        for toks, streams, am in zip(data.tokens, data.streams, data.argmax):
            t = toks.shape[0]
            if t < 2:
                continue
            aux = torch.cat([streams[b, : t - 1] for b in idx], dim=-1)
            logits = draft(toks[1:][None], aux[None].to(draft.fc.weight.dtype),
                           torch.arange(t - 1, device=toks.device))[0]
            pred = draft.to_target_ids(logits.argmax(-1))
            correct += int((pred == am[1:]).sum())
            total += t - 1
        scores.append(CandidateScore(cand.boundaries, cand.sources, correct, total))
    scores.sort(key=lambda s: (-s.correct, order[s.boundaries]))
    return scores


def chance_level(data: TeacherData) -> float:
    """Accuracy of always predicting the most frequent label: the bar a real layout must clear."""
    labels = data.labels()
    if labels.numel() == 0:
        return 0.0
    _, counts = torch.unique(labels, return_counts=True)
    return float(counts.max()) / labels.numel()


def decide(
    ranked: Sequence[CandidateScore], chance: float, min_accuracy: float, min_margin: float
) -> tuple[str, str]:
    """Clear winner only if the best is well above chance, above ``min_accuracy`` and ahead of the
    runner-up by ``min_margin``; otherwise say why there is no clear winner."""
    if not ranked:
        return NO_CLEAR_WINNER, "no candidate layout of the draft's size fits this target"
    best = ranked[0]
    ru = ranked[1] if len(ranked) > 1 else None
    floor = max(min_accuracy, 2 * chance)
    if best.accuracy < floor:
        return NO_CLEAR_WINNER, (
            f"the best layout {layout_label(best.boundaries)} reaches only "
            f"{best.accuracy:.1%} top-1 agreement (chance {chance:.1%}, floor {floor:.1%}); "
            "the mismatch is beyond the layout: draft weights, d2t vocabulary mapping, norms, "
            "or a draft trained for another target"
        )
    if ru is not None and best.accuracy - ru.accuracy < min_margin:
        return NO_CLEAR_WINNER, (
            f"{layout_label(best.boundaries)} ({best.accuracy:.1%}) and "
            f"{layout_label(ru.boundaries)} ({ru.accuracy:.1%}) are within "
            f"{min_margin:.0%} of each other; run more tokens (--random-tokens) to separate them"
        )
    margin = (
        ""
        if ru is None
        else f", {(best.accuracy - ru.accuracy) * 100:.1f} points ahead of {layout_label(ru.boundaries)}"
    )
    return CLEAR_WINNER, (
        f"{layout_label(best.boundaries)} reaches {best.accuracy:.1%} top-1 agreement{margin}"
    )

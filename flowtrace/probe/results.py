"""Result records of the probe and their JSON form (schema ``flowtrace.probe/1``).

Everything here is plain data: frozen, slotted dataclasses with no torch inside, so that results
can be built, compared, serialised and rendered without the heavy dependency. Layouts are always
lists of *boundary indices* (b=0 embedding output, b=k output of layer k-1, b=L last layer output
before the final norm) under the key ``"boundaries"``, the same vocabulary as ``flowtrace trace``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

SCHEMA = "flowtrace.probe/1"

CONFIRMED = "confirmed"
REFUTED = "refuted"
INCONCLUSIVE = "inconclusive"
OBSERVED = "observed"
NOTHING_OBSERVED = "nothing observed"
CLEAR_WINNER = "clear winner"
NO_CLEAR_WINNER = "no clear winner"

# Outcomes of one run, the same words as ``flowtrace trace``'s ``outcome``: the engine feeds
# aux states to the concat, raises on the way, or feeds nothing; or (a delta stream) feeds a
# layer's first output without the residual its layers return apart in some slot.
CAPTURES = "captures"
RAISES = "raises"
CAPTURES_NOTHING = "captures_nothing"
CAPTURES_DELTAS = "captures_deltas"
OUTCOMES = (CAPTURES, RAISES, CAPTURES_NOTHING, CAPTURES_DELTAS)
# The view of a split layer value without its residual: what a delta slot matches exactly.
HIDDEN_PART = "hidden part only (residual not added)"


def boundary_label(b: int | None) -> str:
    """Human name of a boundary; b=0 is called out because engines spell it ``-1``."""
    if b is None:
        return "b=?"
    return "b=0 embedding" if b == 0 else f"b={b}"


def layout_label(bs: tuple[int | None, ...] | list[int | None] | None) -> str:
    """``[b=0 embedding, b=3, b=31]``: the form used in text reports."""
    if bs is None:
        return "(none)"
    return "[" + ", ".join(boundary_label(b) for b in bs) + "]"


def _timings_dict(timings: tuple[tuple[str, float], ...]) -> dict[str, float]:
    return {k: round(v, 6) for k, v in timings}


@dataclass(frozen=True, slots=True)
class TargetInfo:
    """What was probed: enough to tell which model a result belongs to and how it was found."""

    name: str
    source: str  # "factory" or "hf-config"
    num_layers: int
    hidden_size: int
    vocab_size: int | None
    embed_module: str
    layers_module: str
    parameters: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "num_layers": self.num_layers,
            "hidden_size": self.hidden_size,
            "vocab_size": self.vocab_size,
            "embed_module": self.embed_module,
            "layers_module": self.layers_module,
            "parameters": self.parameters,
        }


@dataclass(frozen=True, slots=True)
class ChunkMatch:
    """One hidden-size chunk of an observed aux concatenation, matched by value to the boundaries.

    ``kind`` is how strong the evidence is: ``exact`` (torch.equal), ``allclose`` (within a few
    ulps of the dtype), ``cosine`` (only the most similar boundary; adjacent boundaries are
    correlated, hence the margin to the runner-up) or ``none`` (no boundary of that shape).
    Only exact/allclose matches of a full residual-stream view are ``confirmed``.
    """

    slot: int
    boundary: int | None
    view: str
    kind: str
    confirmed: bool
    equal_boundaries: tuple[int, ...] = ()
    cosine: float | None = None
    runner_up: int | None = None
    runner_up_cosine: float | None = None
    margin: float | None = None
    max_abs_diff: float | None = None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "slot": self.slot,
            "boundary": self.boundary,
            "view": self.view,
            "match": self.kind,
            "confirmed": self.confirmed,
            "equal_boundaries": list(self.equal_boundaries),
            "cosine": _r(self.cosine),
            "runner_up": self.runner_up,
            "runner_up_cosine": _r(self.runner_up_cosine),
            "margin": _r(self.margin),
            "max_abs_diff": _r(self.max_abs_diff),
            "note": self.note,
        }


def _r(x: float | None, nd: int = 6) -> float | None:
    return None if x is None else round(float(x), nd)


@dataclass(frozen=True, slots=True)
class Observation:
    """One place where aux hidden states were seen: the draft ``fc`` input, a concat call, or the
    model's returned aux list/packed buffer."""

    source: str
    kind: str  # "fc-input" | "concat" | "model-output"
    chunks: tuple[ChunkMatch, ...]

    @property
    def boundaries(self) -> tuple[int | None, ...]:
        return tuple(c.boundary for c in self.chunks)

    @property
    def all_confirmed(self) -> bool:
        return bool(self.chunks) and all(c.confirmed for c in self.chunks)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "kind": self.kind,
            "boundaries": list(self.boundaries),
            "all_confirmed": self.all_confirmed,
            "chunks": [c.to_dict() for c in self.chunks],
        }


def is_delta(chunk: ChunkMatch) -> bool:
    """The chunk is exactly a layer's first output without the residual (a delta slot)."""
    return not chunk.confirmed and chunk.kind in ("exact", "allclose") and chunk.view == HIDDEN_PART


@dataclass(frozen=True, slots=True)
class Claim:
    """A static prediction to check: from ``--expect`` or a ``flowtrace trace --format json`` file.

    ``outcome`` is what the trace predicts for the run (``captures`` these boundaries,
    ``raises`` at ``raises_at`` "file:line", ``captures_nothing``, or ``captures_deltas``);
    ``--expect`` always claims ``captures``. ``deltas`` (``captures_deltas`` only) marks each
    slot that holds what layer b - 1 returns first, without the residual, rather than the
    residual stream at ``boundaries[i]`` = b.
    """

    source: str
    boundaries: tuple[int, ...]
    model: str | None = None
    outcome: str = CAPTURES
    raises_at: str | None = None
    layer_ids: tuple[int, ...] | None = None
    deltas: tuple[bool, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "source": self.source,
            "model": self.model,
            "boundaries": list(self.boundaries),
            "outcome": self.outcome,
            "raises_at": self.raises_at,
            "layer_ids": None if self.layer_ids is None else list(self.layer_ids),
        }
        if self.outcome == CAPTURES_DELTAS:  # which slots are deltas: only a delta claim has any
            out["deltas"] = list(self.deltas)
        return out


@dataclass(frozen=True, slots=True)
class Raised:
    """An exception the target raised during the run, with the frames it passed (innermost last).

    Frames are "file:line"; a ``raises`` claim is confirmed when its ``raises_at`` is one of them.
    """

    type: str
    message: str
    frames: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "message": self.message, "frames": list(self.frames)}


@dataclass(frozen=True, slots=True)
class SlotVerdict:
    """Claim vs observation for one aux slot, with the evidence in words."""

    slot: int
    expected: int | None
    observed: int | None
    verdict: str
    evidence: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "slot": self.slot,
            "expected": self.expected,
            "observed": self.observed,
            "verdict": self.verdict,
            "evidence": self.evidence,
        }


@dataclass(frozen=True, slots=True)
class CaptureResult:
    """Result of ``probe capture``: observed layouts, matches and (with a claim) verdicts."""

    target: TargetInfo
    device: str
    dtype: str
    eager: bool
    timings: tuple[tuple[str, float], ...]
    observations: tuple[Observation, ...]
    primary: int | None
    claim: Claim | None
    slots: tuple[SlotVerdict, ...]
    verdict: str
    warnings: tuple[str, ...] = ()
    raised: Raised | None = None

    @property
    def outcome(self) -> str:
        """What the run did: raised, fed aux states to the concat/fc/output, or fed none."""
        if self.raised is not None:
            return RAISES
        if self.primary is None:
            return CAPTURES_NOTHING
        chunks = self.observations[self.primary].chunks
        return CAPTURES_DELTAS if any(is_delta(c) for c in chunks) else CAPTURES

    @property
    def model(self) -> str | None:
        """The engine model class this result speaks for (named by the claim), if known."""
        return None if self.claim is None else self.claim.model

    @property
    def boundaries(self) -> tuple[int | None, ...] | None:
        """The observed layout (from the most direct observation), or None if nothing was seen."""
        if self.primary is None:
            return None
        return self.observations[self.primary].boundaries

    @property
    def exit_code(self) -> int:
        """0 when a claim is confirmed (or there is no claim); 1 when refuted or inconclusive."""
        if self.claim is None:
            return 0
        return 0 if self.verdict == CONFIRMED else 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "command": "capture",
            "model": self.model,
            "target": self.target.to_dict(),
            "device": self.device,
            "dtype": self.dtype,
            "execution": "eager" if self.eager else "default",
            "timings": _timings_dict(self.timings),
            "outcome": self.outcome,
            "raised": None if self.raised is None else self.raised.to_dict(),
            "boundaries": None if self.boundaries is None else list(self.boundaries),
            "primary_observation": self.primary,
            "observations": [o.to_dict() for o in self.observations],
            "claim": None if self.claim is None else self.claim.to_dict(),
            "slots": [s.to_dict() for s in self.slots],
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "warnings": list(self.warnings),
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)


@dataclass(frozen=True, slots=True)
class DraftInfo:
    """The draft checkpoint as loaded: sizes, vocab mapping, and where its layout claim came from."""

    path: str
    weights_file: str
    n_aux: int
    hidden_size: int
    target_hidden_size: int
    vocab_size: int
    draft_vocab_size: int
    config_boundaries: tuple[int, ...] | None
    norm_before_residual: bool
    embeddings: str  # "draft" or "target"

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "weights_file": self.weights_file,
            "n_aux": self.n_aux,
            "hidden_size": self.hidden_size,
            "target_hidden_size": self.target_hidden_size,
            "vocab_size": self.vocab_size,
            "draft_vocab_size": self.draft_vocab_size,
            "config_boundaries": None
            if self.config_boundaries is None
            else list(self.config_boundaries),
            "norm_before_residual": self.norm_before_residual,
            "embeddings": self.embeddings,
        }


@dataclass(frozen=True, slots=True)
class CandidateScore:
    """Teacher-forced step-0 top-1 agreement of the draft when fed one candidate layout."""

    boundaries: tuple[int, ...]
    sources: tuple[str, ...]
    correct: int
    total: int

    @property
    def accuracy(self) -> float:
        return self.correct / self.total if self.total else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "boundaries": list(self.boundaries),
            "sources": list(self.sources),
            "correct": self.correct,
            "total": self.total,
            "accuracy": round(self.accuracy, 6),
        }


@dataclass(frozen=True, slots=True)
class DraftResult:
    """Result of ``probe draft``: candidate layouts ranked by how well the draft predicts with them."""

    target: TargetInfo
    draft: DraftInfo
    device: str
    dtype: str
    eager: bool
    timings: tuple[tuple[str, float], ...]
    sequences: int
    positions: int
    chance: float
    candidates: tuple[CandidateScore, ...]  # ranked, best first
    verdict: str  # CLEAR_WINNER or NO_CLEAR_WINNER
    reason: str
    claim: Claim | None = None
    claim_verdict: str | None = None
    claim_evidence: str = ""
    warnings: tuple[str, ...] = ()
    min_accuracy: float = 0.0
    min_margin: float = 0.0
    token_source: str = ""

    @property
    def winner(self) -> CandidateScore | None:
        return self.candidates[0] if self.candidates and self.verdict == CLEAR_WINNER else None

    @property
    def margin(self) -> float | None:
        if len(self.candidates) < 2:
            return None
        return self.candidates[0].accuracy - self.candidates[1].accuracy

    @property
    def boundaries(self) -> tuple[int, ...] | None:
        w = self.winner
        return None if w is None else w.boundaries

    @property
    def exit_code(self) -> int:
        """With a claim: 0 only if the claim is the clear winner. Without: 0 iff a clear winner."""
        if self.claim is not None:
            return 0 if self.claim_verdict == CONFIRMED else 1
        return 0 if self.verdict == CLEAR_WINNER else 1

    def to_dict(self) -> dict[str, Any]:
        best = self.candidates[0] if self.candidates else None
        return {
            "schema": SCHEMA,
            "command": "draft",
            "target": self.target.to_dict(),
            "draft": self.draft.to_dict(),
            "device": self.device,
            "dtype": self.dtype,
            "execution": "eager" if self.eager else "default",
            "timings": _timings_dict(self.timings),
            "tokens": {
                "source": self.token_source,
                "sequences": self.sequences,
                "positions": self.positions,
            },
            "chance": round(self.chance, 6),
            "thresholds": {"min_accuracy": self.min_accuracy, "min_margin": self.min_margin},
            "boundaries": None if self.boundaries is None else list(self.boundaries),
            "best": None if best is None else best.to_dict(),
            "margin": _r(self.margin),
            "candidates": [c.to_dict() for c in self.candidates],
            "verdict": self.verdict,
            "reason": self.reason,
            "claim": None if self.claim is None else self.claim.to_dict(),
            "claim_verdict": self.claim_verdict,
            "claim_evidence": self.claim_evidence,
            "exit_code": self.exit_code,
            "warnings": list(self.warnings),
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)


__all__ = [
    "SCHEMA",
    "CONFIRMED",
    "REFUTED",
    "INCONCLUSIVE",
    "OBSERVED",
    "NOTHING_OBSERVED",
    "CLEAR_WINNER",
    "NO_CLEAR_WINNER",
    "CAPTURES",
    "RAISES",
    "CAPTURES_NOTHING",
    "CAPTURES_DELTAS",
    "HIDDEN_PART",
    "OUTCOMES",
    "Raised",
    "TargetInfo",
    "ChunkMatch",
    "Observation",
    "Claim",
    "SlotVerdict",
    "CaptureResult",
    "DraftInfo",
    "CandidateScore",
    "DraftResult",
    "boundary_label",
    "is_delta",
    "layout_label",
]

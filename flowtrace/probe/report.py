"""Text rendering of probe results (torch-free); JSON lives on the result objects themselves."""

from __future__ import annotations

from flowtrace.probe.results import (
    CAPTURES,
    CLEAR_WINNER,
    CONFIRMED,
    NOTHING_OBSERVED,
    REFUTED,
    CaptureResult,
    Claim,
    DraftResult,
    TargetInfo,
    boundary_label,
    layout_label,
)

EAGER_NOTE = "eager (no CUDA graphs, no torch.compile)"


def _timings(phases: tuple[tuple[str, float], ...]) -> str:
    return ", ".join(f"{k} {v:.2f}s" for k, v in phases)


def _target_line(t: TargetInfo, device: str, dtype: str, eager: bool) -> str:
    return (
        f"target {t.name}: {t.num_layers} layers, hidden {t.hidden_size}, "
        f"{t.parameters / 1e6:.1f}M params; {device} {dtype}, {EAGER_NOTE if eager else 'default execution'}"
    )


def _verdict_banner(verdict: str) -> str:
    if verdict == REFUTED:
        return "*** REFUTED ***"
    if verdict == CONFIRMED:
        return "CONFIRMED"
    return verdict.upper()


def _claim_layout(c: Claim) -> str:
    if c.outcome == CAPTURES:
        return layout_label(c.boundaries)
    return c.outcome + (f" at {c.raises_at}" if c.raises_at else "")


def capture_text(r: CaptureResult) -> str:
    lines = ["flowtrace probe capture", _target_line(r.target, r.device, r.dtype, r.eager)]
    if r.raised is not None:
        where = f" at {r.raised.frames[-1]}" if r.raised.frames else ""
        lines.append(f"outcome: raises ({r.raised.type}: {r.raised.message}{where})")
    elif r.primary is None:
        lines.append("observed aux layout: (nothing observed)")
    else:
        o = r.observations[r.primary]
        lines.append(f"observed aux layout: {layout_label(o.boundaries)}  (from {o.source})")
    for i, o in enumerate(r.observations):
        mark = "*" if i == r.primary else " "
        lines.append(f" {mark} {o.source}: {layout_label(o.boundaries)}")
        for c in o.chunks:
            cos = "" if c.cosine is None else f" cosine {c.cosine:.4f}"
            ru = (
                ""
                if c.runner_up is None or c.margin is None
                else f", runner-up {boundary_label(c.runner_up)} margin {c.margin:.4f}"
            )
            view = "" if c.view in ("stream", "") else f" [{c.view}]"
            state = "confirmed" if c.confirmed else "not confirmed"
            note = f" ({c.note})" if c.note else ""
            lines.append(
                f"      slot {c.slot}: {boundary_label(c.boundary)}{view} {c.kind} match, "
                f"{state};{cos}{ru}{note}"
            )
    if r.claim is not None:
        model = f" for model {r.claim.model}" if r.claim.model else ""
        lines.append(f"claim ({r.claim.source}{model}): {_claim_layout(r.claim)}")
        for s in r.slots:
            lines.append(
                f"  slot {s.slot}: expected {boundary_label(s.expected) if s.expected is not None else '-'}"
                f", observed {boundary_label(s.observed) if s.observed is not None else '-'}: "
                f"{s.verdict.upper() if s.verdict == REFUTED else s.verdict} - {s.evidence}"
            )
        lines.append(f"verdict: {_verdict_banner(r.verdict)}")
    elif r.verdict == NOTHING_OBSERVED:
        lines.append("verdict: nothing observed")
    for w in r.warnings:
        lines.append(f"warning: {w}")
    lines.append(f"timings: {_timings(r.timings)}")
    return "\n".join(lines) + "\n"


def draft_text(r: DraftResult, top: int = 12) -> str:
    d = r.draft
    lines = [
        "flowtrace probe draft",
        _target_line(r.target, r.device, r.dtype, r.eager),
        (
            f"draft {d.path} ({d.weights_file}): {d.n_aux} aux x {d.target_hidden_size} -> hidden "
            f"{d.hidden_size}, draft vocab {d.draft_vocab_size} of {d.vocab_size}, embeddings from "
            f"the {d.embeddings}; config layout {layout_label(d.config_boundaries)}"
        ),
        (
            f"teacher-forced step-0 top-1 agreement over {r.positions} positions in "
            f"{r.sequences} sequence(s); chance (most frequent label) {r.chance:.1%}"
        ),
        f"{'rank':>4}  {'accuracy':>8}  layout{'':<24}sources",
    ]
    for i, c in enumerate(r.candidates[:top]):
        lines.append(
            f"{i + 1:>4}  {c.accuracy:>8.1%}  {layout_label(c.boundaries):<30}{'; '.join(c.sources)}"
        )
    if len(r.candidates) > top:
        lines.append(f"      ... {len(r.candidates) - top} more (see --format json)")
    if r.verdict == CLEAR_WINNER:
        lines.append(f"winner: {r.reason}")
    else:
        lines.append(f"NO CLEAR WINNER: {r.reason}")
    if r.claim is not None:
        lines.append(
            f"claim ({r.claim.source}): {layout_label(r.claim.boundaries)} -> "
            f"{_verdict_banner(r.claim_verdict or '')}: {r.claim_evidence}"
        )
    for w in r.warnings:
        lines.append(f"warning: {w}")
    lines.append(f"timings: {_timings(r.timings)}")
    return "\n".join(lines) + "\n"

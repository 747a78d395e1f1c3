"""compat's words: the sentences that explain a verdict, written from its typed records.

The analysis (:mod:`flowtrace.analysis.compat`) decides which slots and numbers disagree and
where; these functions say it in English, once, for every output (the text report and the
``differences`` / ``slots[].why`` strings of ``flowtrace.compat/1``).
"""

from __future__ import annotations

from flowtrace.analysis.compat import CompatResult, Difference, DifferenceKind, SlotDifference, SlotForm
from flowtrace.analysis.trace import describe_boundary


def boundary(b: int, L: int) -> str:
    """A boundary in words; ``-L`` stands for HF's hidden_states[L], after the final norm."""
    return "HF hidden_states[L] (after the final norm)" if b == -L else describe_boundary(b, L)


def slot_why(d: SlotDifference, L: int) -> str:
    """One differing slot: what it was trained on, what the engine puts there, and why."""
    if d.form == SlotForm.PATH:
        verb = "the loop records" if d.recorded else "served"
        served = boundary(d.served, L) if d.served is not None else "nothing"
        trained = boundary(d.trained, L) if d.trained is not None else "nothing"
        return (
            f"trained on {trained}, {verb} {served} (draft id {d.draft_id} -> engine index {d.engine_index}) —"
            f" {d.reason}"
        )
    if d.form == SlotForm.EXTRA:
        return (
            f"extra: served {boundary(d.served, L) if d.served is not None else 'nothing'} in engine slot {d.slot},"
            f" trained on nothing there — {d.reason}"
        )
    text = (
        f"trained on {boundary(d.trained, L) if d.trained is not None else 'nothing'}, served"
        f" {boundary(d.served, L) if d.served is not None else 'nothing'}"
    )
    return f"missing: {text} — {d.reason}" if d.form == SlotForm.MISSING else f"{text} — {d.reason}"


def _slot_line(d: Difference, L: int) -> str:
    assert d.slot is not None
    why = slot_why(d.slot, L)
    return (f"slot {d.slot.slot}: {why}" if d.numbered else why) + (
        f"  [{d.slot.decided_at}]" if d.slot.decided_at else ""
    )


def difference_text(d: Difference, result: CompatResult) -> str:
    """One line of the verdict's differences."""
    if d.kind == DifferenceKind.SLOT:
        return _slot_line(d, result.num_layers)
    if d.kind == DifferenceKind.UNDECIDED:
        return (
            "undecided: flowtrace cannot decide what the engine captures:"
            f" {d.reason or 'capture path undecidable'} (not a verdict on the engine; see `flowtrace trace`)"
        )
    if d.kind in (DifferenceKind.RAISES, DifferenceKind.NOTHING):
        what = "raises" if d.kind == DifferenceKind.RAISES else "captures nothing usable"
        return f"the engine {what}: {d.reason or 'no boundary recorded'}{f' (at {d.at})' if d.at else ''}"
    if d.kind == DifferenceKind.DELTAS:
        return f"the engine hands the draft layer outputs without the residual, no residual-stream boundary: {d.reason}"
    if d.kind == DifferenceKind.COUNT:
        return f"count: the draft's fc expects {d.expected} x {d.hidden or 'hidden'}, the engine captures {d.got}"
    if d.kind == DifferenceKind.FIT:
        named = ", ".join(f"id {i} (b={b})" for i, b in d.beyond)
        return (
            f"fit: this draft does not fit this target (L = {d.layers}): {named} lies past the last layer's output"
            f" b={d.layers}"
        )
    if d.kind == DifferenceKind.PHASE and d.phase is not None:  # a phase difference always carries its phase
        from flowtrace.analysis.serving_phase import phase_words

        return f"serving: {phase_words(d.phase, result.num_layers)}{f'  [{d.at}]' if d.at else ''}"
    if d.kind == DifferenceKind.DRAFT_CLASS:
        return (
            f"draft class: the engine loads this draft with {d.reason}, whose fc takes {d.expected} states "
            f"({d.at}); the draft concatenates {d.got}: its fc weight does not load at start-up"
        )
    if d.kind == DifferenceKind.WIDTH:
        return f"width: the draft was trained for target_hidden_size {d.expected}, the target's hidden_size is {d.got}"
    return _checkpoint_text(d, result)


def _checkpoint_text(d: Difference, result: CompatResult) -> str:
    ckpt = result.checkpoint
    assert ckpt is not None
    name, width = ckpt.fc_name, ckpt.fc_in_features
    if d.kind == DifferenceKind.CHECKPOINT_OTHER_TARGET:
        return (
            f"checkpoint: {name} in_features {width} is not a multiple of the target hidden size {d.hidden}: the draft"
            " was trained for another target"
        )
    if d.kind == DifferenceKind.CHECKPOINT_LAYOUT:
        return (
            f"checkpoint: {name} {list(ckpt.fc_shape or ())} takes {d.expected} x {d.hidden}, but the draft config's"
            f" layout names {d.got} states"
        )
    got, hidden = d.got or 0, d.hidden or 0
    return (
        f"checkpoint: {name} takes {d.expected} x {hidden} = {width}, the engine captures {got} x {hidden} ="
        f" {got * hidden}"
    )


def differences_text(result: CompatResult) -> list[str]:
    """Every difference of a verdict, in words (empty: MATCH)."""
    return [difference_text(d, result) for d in result.differences]

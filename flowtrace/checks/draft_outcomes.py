"""What the drafts people ship receive from a model class: the consequence of an id-dependent finding.

A setter that maps ids unlike its siblings, a default that differs, a last layer the loop never
records: each is only a defect when a draft the engine serves gets other states than it was
trained on. Which drafts those are is data, the draft catalogue (:mod:`flowtrace.engines.drafts`):
the published drafts whose target architecture is one the class is registered under (never a
name in code), each traced through the row's chain (:func:`flowtrace.analysis.trace.trace_row`)
with the ids its config writes (when the engine reads that key; else the engine's default) at
its own layer count, and compared with the boundaries it was trained on.

A family with no published draft in the catalogue is measured against the trainers' default
layouts written in the engine's own id convention (the profile's ``embedding_id``), at a typical
depth: what a draft trained for this class with the usual tools would send.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable

from flowtrace.analysis.trace import trace_row
from flowtrace.checks.targets import conventions
from flowtrace.engines.drafts import EAGLE3, TrainerDefault
from flowtrace.engines.training import layout
from flowtrace.model import facts as F
from flowtrace.model.consequence import Consequence, worst

if TYPE_CHECKING:
    from flowtrace.analysis.resolve import ModelRow
    from flowtrace.analysis.scan import ScanResult
    from flowtrace.analysis.trace import TraceResult

ENGINE_DEFAULT = "the engine's default layout"
LAYERS = 32  # the depth a trainer's default layout is measured at when the family has no published draft
_STARTUP_STEPS = frozenset({"setter", "builder", "default", "config"})


@dataclass(frozen=True, slots=True)
class DraftOutcome:
    """One catalogue draft on one model class: the ids handed to the engine, the boundaries it
    was trained on, what the class serves, and the consequence (None: it gets what it was
    trained on)."""

    draft: str
    published: bool  # a published draft (False: a trainer's default layout)
    layers: int
    ids: tuple[int, ...] | None  # what the engine is handed (None: its default applies)
    trained: tuple[int, ...]
    served: tuple[int, ...] | None
    consequence: Consequence | None
    words: str  # what happens, for the finding's effect ("silently receives b=[...] instead of b=[...]")
    row: str = ""

    @property
    def wrong(self) -> bool:
        return self.consequence is not None


@dataclass(frozen=True, slots=True)
class _Candidate:
    name: str
    published: bool
    layers: int
    ids: tuple[int, ...] | None
    key: str | None
    trained: tuple[int, ...]


def _published(result: ScanResult, row: ModelRow, method: str) -> list[_Candidate]:
    out = []
    for d in result.drafts.for_architectures(row.architectures, method):
        trained = result.drafts.trained(d)
        if trained is not None and d.num_hidden_layers is not None:
            out.append(_Candidate(d.name, True, d.num_hidden_layers, d.ids, d.key, trained))
    return out


def _trainer_defaults(result: ScanResult, method: str) -> list[_Candidate]:
    """The trainers' default layouts written in the engine's own id convention, at LAYERS."""
    embedding = conventions(result).embedding_id
    out = []
    for t in result.drafts.trainers:
        conv = result.drafts.conventions.get(t.convention)
        if t.method != method or conv is None or embedding is None or conv.embedding_id != embedding:
            continue
        out.append(_trainer_candidate(result, t))
    return out


def _trainer_candidate(result: ScanResult, t: TrainerDefault) -> _Candidate:
    ids = layout(t.ids, LAYERS) if t.writes_ids else None
    return _Candidate(t.name, False, LAYERS, ids, t.key, result.drafts.trainer_trained(t, LAYERS))


def candidates(result: ScanResult, row: ModelRow, method: str = EAGLE3) -> list[_Candidate]:
    """The row's family's published drafts, else the trainers' defaults (each says which)."""
    return _published(result, row, method) or _trainer_defaults(result, method)


def handed_ids(result: ScanResult, ids: tuple[int, ...] | None, key: str | None) -> tuple[int, ...] | None:
    """What the engine is handed: the draft's ids when the engine reads the key they are
    written under (the profile's ``[draft] layer_id_keys``), else nothing (its default)."""
    if ids is None or key is None or key not in result.engine_keys:
        return None
    return ids


def _raise_phase(traced: TraceResult) -> str:
    """Where the engine raises: ``runner`` (its own model check, with its own message: a
    refusal), ``startup`` (the setter, while the model loads) or ``serving`` (a forward). Read
    off the last step of links 1-7 (the serving phase's steps come after it)."""
    last = next((s.kind for s in reversed(traced.steps) if s.kind != "serving"), "")
    return "runner" if last == "runner" else "startup" if last in _STARTUP_STEPS else "serving"


def judge(traced: TraceResult, trained: tuple[int, ...], what: str) -> tuple[Consequence | None, str] | None:
    """The consequence for a draft trained on ``trained`` of what the trace says the engine
    does (None: the trace cannot decide)."""
    if traced.outcome == F.Outcome.RAISES:
        where = f" at {traced.raises_at}" if traced.raises_at else ""
        phase = _raise_phase(traced)
        if phase == "runner":
            return Consequence.REFUSED_STARTUP, f"{what} is refused at start-up{where}: {traced.reason}"
        if phase == "startup":
            return Consequence.CRASH_STARTUP, f"{what} makes start-up fail{where}: {traced.reason}"
        return Consequence.CRASH_SERVING, f"{what} makes the engine raise{where}: {traced.reason}"
    # The layout the ids pick: on a delta stream, the boundaries its slots stand at (that each
    # lacks the residual is FT013's finding, not a matter of the draft's id convention).
    served = traced.named_boundaries
    if traced.outcome not in (F.Outcome.CAPTURES, F.Outcome.CAPTURES_DELTAS) or served is None:
        return None
    if sorted(served) == sorted(trained):
        return None, f"{what} gets b={list(trained)}, what it was trained on"
    if len(served) != len(trained):
        return Consequence.CRASH_SERVING, (
            f"{what} gets {len(served)} states (b={list(served)}) instead of {len(trained)} (b={list(trained)}): "
            f"its fc, sized for {len(trained)}, raises in the first draft forward"
        )
    return Consequence.SILENT_WRONG, f"{what} silently receives b={list(served)} instead of b={list(trained)}"


def outcome_of(result: ScanResult, row: ModelRow, c: _Candidate) -> DraftOutcome | None:
    ids = handed_ids(result, c.ids, c.key)
    traced = trace_row(result.project, row, list(ids) if ids is not None else None, c.layers)
    given = f"ids {list(ids)}" if ids is not None else "no ids (the engine's default)"
    what = (
        f"{c.name} ({given}, L={c.layers})"
        if c.published
        else f"a draft trained on the {c.name} layout ({given}, L={c.layers})"
    )
    judged = judge(traced, c.trained, what)
    if judged is None:
        return None
    consequence, words = judged
    return DraftOutcome(
        c.name, c.published, c.layers, ids, c.trained, traced.named_boundaries, consequence, words, row.name
    )


def outcomes(
    result: ScanResult,
    rows: Iterable[ModelRow],
    method: str = EAGLE3,
    wanted: Callable[[_Candidate], bool] | None = None,
) -> list[DraftOutcome]:
    """The decidable outcomes of the rows' drafts (``wanted`` selects among them: drafts that
    ask for b = L, drafts that write no ids); each says whether it is a published draft or a
    trainer's default layout standing in for a family with none in the catalogue."""
    out: list[DraftOutcome] = []
    seen: set[tuple[str, str]] = set()
    for row in rows:
        for c in candidates(result, row, method):
            if (wanted is None or wanted(c)) and (c.name, row.name) not in seen:
                seen.add((c.name, row.name))
                o = outcome_of(result, row, c)
                if o is not None:
                    out.append(o)
    return out


def default_outcome(result: ScanResult, row: ModelRow, method: str = EAGLE3) -> DraftOutcome | None:
    """What the engine's own default layout (no ids in the draft config) does to this class,
    at the depth of its family's first published draft (else LAYERS): a default that asks for
    an index the loop never records leaves the fc a state short, whatever the draft. (Other
    failures of the default path are not about the indices it asks for: None.)"""
    found = _published(result, row, method)
    layers = found[0].layers if found else LAYERS
    traced = trace_row(result.project, row, None, layers)
    what = f"{ENGINE_DEFAULT} (no ids, L={layers})"
    if traced.outcome != F.Outcome.CAPTURES or not traced.dropped or traced.capture_indices is None:
        return None
    asked, kept = len(traced.capture_indices), len(traced.boundaries or ())
    lost = ", ".join(str(i) for i, _ in traced.dropped)
    words = (
        f"{what} asks for capture index {lost}, which the loop never records: the fc, sized for {asked} states, "
        f"gets {kept} and raises in the first draft forward"
    )
    return DraftOutcome(
        ENGINE_DEFAULT, False, layers, None, (), traced.boundaries, Consequence.CRASH_SERVING, words, row.name
    )


@dataclass(frozen=True, slots=True)
class Grade:
    """An id-dependent finding's consequence over the drafts it affects, and the words."""

    consequence: Consequence | None
    effect: str | None
    drafts: tuple[str, ...] = ()  # the catalogue drafts named


def _listed(names: list[str], shown: int = 4) -> str:
    head = ", ".join(names[:shown])
    return head + (f" and {len(names) - shown} more" if len(names) > shown else "")


def _kinds(found: list[DraftOutcome]) -> str:
    """``4 published drafts (a, b, …)`` and/or ``drafts on 2 trainers' default layouts (…)``."""
    published = sorted({o.draft for o in found if o.published})
    defaults = sorted({o.draft for o in found if not o.published and o.draft != ENGINE_DEFAULT})
    parts = [ENGINE_DEFAULT] if any(o.draft == ENGINE_DEFAULT for o in found) else []
    if published:
        parts.append(f"{len(published)} published draft{'s' if len(published) > 1 else ''} ({_listed(published)})")
    if defaults:
        rows = sorted({o.row for o in found if not o.published and o.draft != ENGINE_DEFAULT and o.row})
        for_rows = f" for {_listed(rows, 3)}, whose family has no published draft in the catalogue" if rows else ""
        parts.append(
            f"drafts on {len(defaults)} trainer default"
            f" layout{'s' if len(defaults) > 1 else ''} ({_listed(defaults)}){for_rows}"
        )
    return " and ".join(parts)


def grade(
    found: list[DraftOutcome], *, served_right: Consequence | None = Consequence.FRAGILE, none: str = ""
) -> Grade:
    """The worst consequence over the affected drafts, with the drafts named.

    Every draft served what it was trained on: ``served_right`` (a convention that differs
    from the majority but serves its family's drafts is fragile, at most a warning; a
    capability no draft asks for is None, info). No draft at all: None with ``none`` words."""
    if not found:
        return Grade(None, none or None)
    wrong = [o for o in found if o.wrong]
    if not wrong:
        names = sorted({o.draft for o in found})
        return Grade(served_right, f"serves what they were trained on to {_kinds(found)}", tuple(names))
    consequence = worst(tuple(o.consequence for o in wrong if o.consequence is not None))
    first = next(o for o in wrong if o.consequence is consequence)
    head = f"{first.row}: {first.words}" if first.row else first.words
    rest = [o for o in wrong if o.draft != first.draft]
    more = f"; also affected: {_kinds(rest)}" if rest else ""
    right = [o for o in found if not o.wrong and o.draft not in {w.draft for w in wrong}]
    fine = f"; served right: {_kinds(right)}" if right else ""
    return Grade(consequence, head + more + fine, tuple(sorted({o.draft for o in wrong})))

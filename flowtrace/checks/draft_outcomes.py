"""What drafts written in the engine's own id convention receive from a model: the consequence of an id mapping.

A setter that maps ids unlike its siblings is only a defect when a draft the engine serves gets
other states than the ones its ids name. The engine's convention is its profile's
``embedding_id``: ids name boundaries ``b = id - embedding_id`` (``-1``: "output of layer i",
``0``: boundaries). A few plausible drafts in that convention (the usual three-layer layouts,
with and without the embedding) are traced through the row's chain
(:func:`flowtrace.analysis.trace.trace_row`) and compared with what their ids name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from flowtrace.analysis.trace import trace_row
from flowtrace.checks.targets import conventions
from flowtrace.model import facts as F
from flowtrace.model.consequence import Consequence

if TYPE_CHECKING:
    from flowtrace.analysis.resolve import ModelRow
    from flowtrace.analysis.scan import ScanResult

LAYERS = 32  # a typical target depth; the layouts below scale with it


@dataclass(frozen=True, slots=True)
class DraftOutcome:
    """One plausible draft's ids, the boundaries they name and what the model serves."""

    ids: tuple[int, ...]
    wanted: tuple[int, ...]
    served: tuple[int, ...] | None  # None: the engine raises
    consequence: Consequence
    words: str


def plausible_ids(embedding_id: int) -> tuple[tuple[int, ...], ...]:
    """Draft layouts in the engine's convention: low/middle/high layers (both common
    spellings) and the same with the embedding first."""
    shift = -embedding_id  # id -> boundary offset
    low = [(2 - shift, LAYERS // 2 - shift, LAYERS - 3 - shift), (3 - shift, LAYERS // 2 + 1 - shift, LAYERS - 2 - shift)]
    return (*low, (embedding_id, LAYERS // 2 - shift, LAYERS - 3 - shift))


def first_wrong(result: ScanResult, row: ModelRow, embedding_first: bool = False) -> DraftOutcome | None:
    """The first plausible draft this row serves wrong (None: all of them get what they name);
    ``embedding_first`` tries the layout that asks for the embedding before the others."""
    embedding = conventions(result).embedding_id
    if embedding is None or row.chain is None:
        return None
    layouts = plausible_ids(embedding)
    for ids in (layouts[-1:] + layouts[:-1]) if embedding_first else layouts:
        wanted = tuple(i - embedding for i in ids)
        traced = trace_row(result.project, row, list(ids), LAYERS)
        if traced.outcome == F.Outcome.RAISES:
            where = f" at {traced.raises_at}" if traced.raises_at else ""
            return DraftOutcome(ids, wanted, None, Consequence.CRASH_SERVING,
                                f"a draft with ids {list(ids)} (L={LAYERS}) makes the engine raise{where}: {traced.reason}")
        served = traced.boundaries
        if traced.outcome != F.Outcome.CAPTURES or served is None or sorted(served) == sorted(wanted):
            continue
        if len(served) != len(wanted):
            return DraftOutcome(ids, wanted, served, Consequence.CRASH_SERVING, (
                f"a draft with ids {list(ids)} (L={LAYERS}) gets {len(served)} states (b={list(served)}) instead of "
                f"{len(wanted)} (b={list(wanted)}): its fc, sized for {len(wanted)}, raises in the first draft forward"
            ))
        return DraftOutcome(ids, wanted, served, Consequence.SILENT_WRONG, (
            f"a draft with ids {list(ids)} (L={LAYERS}) silently receives b={list(served)} instead of b={list(wanted)}"
        ))
    return None

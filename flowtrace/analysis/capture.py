"""One setter-driven model row's resolved capture path, as resolution hands it on.

:mod:`flowtrace.analysis.resolve` builds it; :mod:`flowtrace.analysis.chain` turns it into
typed links. It lives apart from both so neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass

from flowtrace.model import facts as F
from flowtrace.model.links import NOT_BREAKING, Problem, ReturnLink, SlotsLink, StreamLink, UnreadLink


@dataclass(frozen=True, slots=True)
class Capture:
    setter: F.SetterFact
    inherited: bool
    id_transform: str
    transform_note: str | None
    effective_transform: str
    delegates_to: str | None
    default_layers: str | None
    default_location: F.Location | None
    holder: str | None  # class that holds the capture attribute and runs the capture loop
    site: F.CaptureSiteFact | None
    point: str
    point_note: str
    point_evidence: tuple[F.Location, ...]
    embedding_capturable: bool | None
    last_layer_capturable: bool | None
    chain: tuple[F.SetterFact, ...]  # setters followed, outermost first
    problems: tuple[str, ...]  # the texts of ``issues`` (kept for readers of flat rows)
    issues: tuple[Problem, ...] = ()  # typed problems: rules select on their kinds
    chain_targets: tuple[str, ...] = ()  # the class each setter of ``chain`` acts on
    holder_kind: F.HolderKind = F.HolderKind.DIRECT
    depends_on: str | None = None  # config key a dynamic holder is built from
    stream: StreamLink | None = None
    slots: SlotsLink | None = None
    concat_order: F.ConcatOrder = F.ConcatOrder.LOOP
    returns: ReturnLink | None = None  # link 6: whether the states reach the runner
    unread: UnreadLink | None = None  # link 8: the setters write what the forward does not read

    def kinds(self) -> set[F.ProblemKind]:
        return {p.kind for p in self.issues}

    def breaking(self) -> set[F.ProblemKind]:
        """Kinds of the problems that make the row ``broken`` (those behind ``problems``)."""
        return {p.kind for p in self.issues if p.kind not in NOT_BREAKING}


__all__ = ["Capture"]

"""One answer shape for every row of every engine.

Every row's capture path is one :class:`flowtrace.model.links.CaptureChain`, whatever its id
source (a setter the draft's ids reach, a config attribute, a build context, a serving-config
metadata hook). It answers the same questions — where the ids come from, what happens to them,
who holds them, where a state is recorded and at which point, whether the embedding (b = 0)
and the last layer (b = L) can be asked for, and how it ends — so users, renderers and rules
read one object whatever the engine. This module derives, from the chain's typed fields only,
what the outputs state in one set of words: the id source, the capturability and the row's
outcome without concrete ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from flowtrace.model import facts as F

if TYPE_CHECKING:
    from flowtrace.analysis.resolve import ModelRow
    from flowtrace.model.links import CaptureChain

_CAPTURING = frozenset({"supported", "inherited", "delegated"})
# Chain problems after which the ids never reach a recorded state.
_NOTHING = (
    F.ProblemKind.NO_CAPTURE_SITE,
    F.ProblemKind.SETTER_WRITES_NOTHING,
    F.ProblemKind.RETURN_DROPPED,
    F.ProblemKind.SETTER_WRITES_UNREAD,
)
# Chain problems that make the engine raise once it sets the ids or runs a forward.
_RAISING = (F.ProblemKind.DELEGATE_LACKS_SETTER, F.ProblemKind.PACKER_COUNT_CHECK)


@dataclass(frozen=True, slots=True)
class IdSource:
    """Where a row's ids come from: ``kind`` "setter" (the draft's ids handed to an entry
    setter), "config" (a config attribute a builder writes), "context" (a build-context field)
    or "hook" (the engine's serving config, read by a metadata hook)."""

    kind: str
    label: str  # the setter's qualname, or the config key / context field / serving key
    location: F.Location | None
    inherited: bool | None = None  # setters only: defined on a base class


@dataclass(frozen=True, slots=True)
class Verdict:
    """How a row ends without concrete ids (``trace`` decides it for given ids)."""

    outcome: F.Outcome | str  # captures | captures_deltas | raises | captures_nothing | unknown | refuses
    reason: str | None
    location: F.Location | None


def id_source(row: ModelRow) -> IdSource | None:
    c, chain = row.capture, row.chain
    if c is not None:
        return IdSource("setter", f"{c.setter.class_qualname}.{c.setter.method}", c.setter.location, c.inherited)
    if chain is not None:
        return IdSource(chain.source.word, chain.source.key or "", chain.source.location)
    return None


def verdict(row: ModelRow) -> Verdict:
    """The row's outcome from its links alone: a setter chain that resolves captures; one that
    depends on the target config is unknown; a broken one raises (its return path or its setter
    fails) or captures nothing; any other source states its own outcome."""
    chain = row.chain
    stated = chain.production.decision if chain is not None and not chain.setter_driven else None
    if stated is not None:
        return Verdict(stated.outcome, stated.reason, stated.location)
    if row.capture is None or chain is None:
        return Verdict(
            F.Outcome.CAPTURES_NOTHING, "no capture path: the class neither takes ids nor records states", None
        )
    if row.support in _CAPTURING:
        return _capturing_verdict(chain)
    problems = list(chain.problems)
    if row.support == "conditional":
        first = problems[0] if problems else None
        return Verdict(
            F.Outcome.UNKNOWN,
            first.text if first else "depends on the target config",
            first.location if first else None,
        )
    returns = chain.returns
    if returns is not None and returns.raises:
        return Verdict(F.Outcome.RAISES, returns.reason, returns.location)
    for kinds, outcome in ((_RAISING, F.Outcome.RAISES), (_NOTHING, F.Outcome.CAPTURES_NOTHING)):
        hit = next((p for p in problems if p.kind in kinds), None)
        if hit is not None:
            return Verdict(outcome, hit.text, hit.location)
    first = problems[0] if problems else None
    return Verdict(F.Outcome.UNKNOWN, first.text if first else None, first.location if first else None)


def _capturing_verdict(chain: CaptureChain) -> Verdict:
    """A capturing row captures boundaries, unless its site records a delta stream: then the
    matrix must not say ``captures`` while every trace past the embedding says the draft gets
    layer outputs without the residual (the tracer's ``captures_deltas``, link 5)."""
    stream = chain.stream
    if stream is None or stream.kind != F.StreamKind.DELTA:
        return Verdict(F.Outcome.CAPTURES, None, None)
    reason = (
        f"`{stream.expression}` is recorded alone while the layers return the residual apart: past the "
        "embedding each slot is a layer's output without the residual, not a residual-stream boundary"
    )
    return Verdict(F.Outcome.CAPTURES_DELTAS, reason, chain.site.location if chain.site is not None else None)


def capturability(chain: CaptureChain) -> tuple[bool | None, bool | None]:
    """(embedding, last layer) of a chain: what its site records (decided with the point,
    analysis/chain.py); a hook no layer calls writes no boundary at all; a chain without a
    site otherwise decides neither."""
    site = chain.site
    if site is not None:
        return site.embedding_capturable, site.last_layer_capturable
    if chain.source.kind == F.SourceKind.SERVING_CONFIG:
        return False, False  # no layer it builds calls the hook: no boundary is ever written
    return None, None


def point(chain: CaptureChain) -> F.Point:
    """The capture point of a chain (``unknown`` without a site)."""
    return chain.site.point if chain.site is not None else F.Point.UNKNOWN


def mechanism(chain: CaptureChain) -> F.Mechanism | None:
    """How the chain's states are recorded: its site's mechanism; a serving-config source is
    a metadata hook even where no layer calls it; None for no site otherwise."""
    if chain.site is not None:
        return chain.site.mechanism
    return F.Mechanism.HOOK if chain.source.kind == F.SourceKind.SERVING_CONFIG else None


__all__ = ["IdSource", "Verdict", "capturability", "id_source", "mechanism", "point", "verdict"]

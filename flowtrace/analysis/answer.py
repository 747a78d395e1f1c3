"""One answer shape for every row of every engine.

A row's capture path comes either from a setter chain (``resolve.py``: the draft's ids reach
a setter) or from a setter-less source (``config_capture.py``: a config attribute, a build
context, a serving-config metadata hook). Both answer the same questions — where the ids come
from, what happens to them, who holds them, where a state is recorded and at which point,
whether the embedding (b = 0) and the last layer (b = L) can be asked for, and how it ends —
so users, renderers and rules read one object whatever the engine. This module derives the
parts neither path states in the same words: the id source, the capturability of a
setter-less path and the row's outcome without concrete ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from flowtrace.model import facts as F

if TYPE_CHECKING:
    from flowtrace.analysis.resolve import ModelRow

_CAPTURING = frozenset({"supported", "inherited", "delegated"})
# Chain problems after which the ids never reach a recorded state.
_NOTHING = (F.ProblemKind.NO_CAPTURE_SITE, F.ProblemKind.SETTER_WRITES_NOTHING, F.ProblemKind.RETURN_DROPPED, F.ProblemKind.SETTER_WRITES_UNREAD)
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

    outcome: F.Outcome | str  # captures | raises | captures_nothing | unknown | refuses
    reason: str | None
    location: F.Location | None


def id_source(row: ModelRow) -> IdSource | None:
    c, src = row.capture, row.source
    if c is not None:
        return IdSource("setter", f"{c.setter.class_qualname}.{c.setter.method}", c.setter.location, c.inherited)
    if src is not None:
        where = getattr(src, "location", None)
        return IdSource(src.kind, src.key, where)  # type: ignore[attr-defined]
    return None


def verdict(row: ModelRow) -> Verdict:
    """The row's outcome from its links alone: a setter chain that resolves captures; one that
    depends on the target config is unknown; a broken one raises (its return path or its setter
    fails) or captures nothing; a setter-less path states its own outcome."""
    src = row.source
    if row.capture is None and src is not None:
        return Verdict(src.outcome, src.reason, src.reason_location)  # type: ignore[attr-defined]
    chain = row.chain
    if row.capture is None or chain is None:
        return Verdict(F.Outcome.CAPTURES_NOTHING, "no capture path: the class neither takes ids nor records states", None)
    if row.support in _CAPTURING:
        return Verdict(F.Outcome.CAPTURES, None, None)
    problems = list(chain.problems)
    if row.support == "conditional":
        first = problems[0] if problems else None
        return Verdict(F.Outcome.UNKNOWN, first.text if first else "depends on the target config", first.location if first else None)
    returns = chain.returns
    if returns is not None and returns.raises:
        return Verdict(F.Outcome.RAISES, returns.reason, returns.location)
    for kinds, outcome in ((_RAISING, F.Outcome.RAISES), (_NOTHING, F.Outcome.CAPTURES_NOTHING)):
        hit = next((p for p in problems if p.kind in kinds), None)
        if hit is not None:
            return Verdict(outcome, hit.text, hit.location)
    first = problems[0] if problems else None
    return Verdict(F.Outcome.UNKNOWN, first.text if first else None, first.location if first else None)


def source_capturability(src: object) -> tuple[bool | None, bool | None]:
    """(embedding, last layer) of a setter-less path. A recorded capture site knows both; a
    metadata hook called after layer i's feed-forward records b = i + 1, so b = 0 can never be
    asked for (the post-norm id is no boundary) and b = L is id L - 1; a dict store keyed by
    layer records the layer's input or output the same way; a hook no layer calls writes no
    boundary at all; an unknown point decides neither."""
    site = getattr(src, "site", None)
    if isinstance(site, F.CaptureSiteFact):
        return site.embedding_capturable, site.last_layer_capturable
    if site is None and getattr(src, "kind", None) == "hook":
        return False, False  # no layer it builds calls the hook: no boundary is ever written
    point = getattr(src, "point", F.UNKNOWN)
    if site is None or point not in (F.INPUT, F.OUTPUT):
        return None, None
    return point == F.INPUT, point == F.OUTPUT


__all__ = ["IdSource", "Verdict", "id_source", "source_capturability", "verdict"]

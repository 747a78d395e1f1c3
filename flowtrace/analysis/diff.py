"""What changed in capture support between two engine trees (two releases, or a PR's base and head).

An engine upgrade that silently turns ``ids + 1`` into "+1 only if the first id is 1", or moves
a capture from before a layer to after it, breaks every draft trained against the old release
without an error. This module compares the resolved model rows of two scans fact by fact, so
CI on an engine PR (exit 1 on any change) or a user about to upgrade sees exactly which
classes gained or lost capture support and which facts moved.

Rows are matched by qualified name, then (for classes that moved module) by a simple name
that is unique on both sides. Only rows that matter for EAGLE-3 are compared: registered
classes and classes with a capture path.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from flowtrace.analysis.resolve import ModelRow

SCHEMA = "flowtrace.diff/1"
# Support values that mean "the engine can capture aux states for this class".
CAPABLE = frozenset({"supported", "inherited", "delegated", "conditional"})
KINDS = ("gained", "lost", "changed")
SITE_FIELDS = frozenset({"capture_point", "embedding_capturable", "last_layer_capturable", "concat_order"})


@dataclass(frozen=True, slots=True)
class RowFacts:
    """The compared facts of one row, plain values only (JSON-ready)."""

    name: str
    qualname: str
    location: str
    support: str
    facts: tuple[tuple[str, object], ...]  # (field, value), in FIELD order
    site: str | None = None  # the capture site: where point and capturability are decided

    def at(self, field: str | None) -> str:
        """Where ``field`` is decided in this tree: the capture site for site facts, else the setter."""
        return self.site if field in SITE_FIELDS and self.site else self.location

    @property
    def capable(self) -> bool:
        return self.support in CAPABLE


@dataclass(frozen=True, slots=True)
class Change:
    cls: str
    qualname: str
    kind: str  # gained | lost | changed
    field: str | None
    old: object
    new: object
    old_at: str | None
    new_at: str | None


def _capture_facts(row: ModelRow) -> list[tuple[str, object]]:
    c = row.capture
    if c is None:
        return [
            (f, None)
            for f in (
                "id_transform",
                "effective_transform",
                "default_layers",
                "capture_point",
                "embedding_capturable",
                "last_layer_capturable",
                "concat_order",
                "depends_on",
            )
        ]
    depends = getattr(c, "depends_on", None)
    return [
        ("id_transform", c.id_transform),
        ("effective_transform", c.effective_transform),
        ("default_layers", c.default_layers),
        ("capture_point", c.point),
        ("embedding_capturable", c.embedding_capturable),
        ("last_layer_capturable", c.last_layer_capturable),
        ("concat_order", getattr(c, "concat_order", None)),  # present once the core analysis adds it
        ("depends_on", list(depends) if isinstance(depends, (list, tuple)) else depends),
    ]


def row_facts(row: ModelRow) -> RowFacts:
    where = row.capture.setter.location if row.capture is not None else row.location
    site = row.capture.site.location if row.capture is not None and row.capture.site is not None else None
    return RowFacts(
        row.name,
        row.qualname,
        str(where),
        row.support,
        (("support", row.support), *_capture_facts(row)),
        str(site) if site else None,
    )


def _relevant(rows: Iterable[ModelRow], also: set[str]) -> dict[str, RowFacts]:
    """Rows that matter for EAGLE-3 on this side, plus those that matter on the other side
    (a class present in both releases but capture-capable only in one is a change, not an
    addition)."""
    return {r.qualname: row_facts(r) for r in rows if r.registered or r.capture is not None or r.qualname in also}


def _mattering(rows: Iterable[ModelRow]) -> set[str]:
    return {r.qualname for r in rows if r.registered or r.capture is not None}


def _match(
    old: dict[str, RowFacts], new: dict[str, RowFacts]
) -> tuple[list[tuple[RowFacts, RowFacts]], list[RowFacts], list[RowFacts]]:
    """(pairs, only in old, only in new): qualname first, then a simple name unique on both sides."""
    pairs = [(old[q], new[q]) for q in sorted(old.keys() & new.keys())]
    rest_old = {q: f for q, f in old.items() if q not in new}
    rest_new = {q: f for q, f in new.items() if q not in old}

    def unique(rows: dict[str, RowFacts]) -> dict[str, RowFacts]:
        counts: dict[str, int] = {}
        for f in rows.values():
            counts[f.name] = counts.get(f.name, 0) + 1
        return {f.name: f for f in rows.values() if counts[f.name] == 1}

    by_old, by_new = unique(rest_old), unique(rest_new)
    for name in sorted(by_old.keys() & by_new.keys()):
        pairs.append((by_old[name], by_new[name]))
        del rest_old[by_old[name].qualname], rest_new[by_new[name].qualname]
    return (
        pairs,
        sorted(rest_old.values(), key=lambda f: f.qualname),
        sorted(rest_new.values(), key=lambda f: f.qualname),
    )


def _pair_changes(a: RowFacts, b: RowFacts) -> list[Change]:
    if a.capable != b.capable:
        kind = "gained" if b.capable else "lost"
        return [Change(b.name, b.qualname, kind, "support", a.support, b.support, a.location, b.location)]
    if not a.capable and not b.capable:
        # e.g. broken -> none: the capture facts of a class that cannot capture do not matter
        return (
            []
            if a.support == b.support
            else [Change(b.name, b.qualname, "changed", "support", a.support, b.support, a.location, b.location)]
        )
    old, new = dict(a.facts), dict(b.facts)
    return [
        Change(b.name, b.qualname, "changed", field, old[field], new[field], a.at(field), b.at(field))
        for field, _ in b.facts
        if old.get(field) != new[field]
    ]


def diff_rows(
    old_rows: Iterable[ModelRow],
    new_rows: Iterable[ModelRow],
    old_classes: frozenset[str] = frozenset(),
    new_classes: frozenset[str] = frozenset(),
) -> tuple[Change, ...]:
    """Every capture-support change from ``old_rows`` to ``new_rows`` (sorted by class).

    ``old_classes`` / ``new_classes`` are every class qualname each tree defines: a class
    that exists on the other side without a row is reported with support "none" (present,
    no capture), not as absent ("-")."""
    old_rows, new_rows = tuple(old_rows), tuple(new_rows)
    pairs, only_old, only_new = _match(
        _relevant(old_rows, _mattering(new_rows)), _relevant(new_rows, _mattering(old_rows))
    )
    changes: list[Change] = []
    for a, b in pairs:
        changes += _pair_changes(a, b)
    changes += [
        Change(
            f.name,
            f.qualname,
            "lost",
            "support",
            f.support,
            "none" if f.qualname in new_classes else None,
            f.location,
            None,
        )
        for f in only_old
        if f.capable
    ]
    changes += [
        Change(
            f.name,
            f.qualname,
            "gained",
            "support",
            "none" if f.qualname in old_classes else None,
            f.support,
            None,
            f.location,
        )
        for f in only_new
        if f.capable
    ]
    return tuple(sorted(changes, key=lambda c: (c.qualname, KINDS.index(c.kind), c.field or "")))


def change_json(c: Change) -> dict[str, object]:
    return {
        "class": c.cls,
        "qualname": c.qualname,
        "kind": c.kind,
        "field": c.field,
        "old": c.old,
        "new": c.new,
        "old_at": c.old_at,
        "new_at": c.new_at,
    }


def diff_document(changes: tuple[Change, ...], old: str, new: str) -> dict[str, object]:
    counts = {k: sum(1 for c in changes if c.kind == k) for k in KINDS}
    return {
        "schema": SCHEMA,
        "old": old,
        "new": new,
        "summary": {**counts, "classes": len({c.qualname for c in changes})},
        "changes": [change_json(c) for c in changes],
    }

"""``flowtrace diff`` as text: one line per change, grouped gained / lost / changed.

A reviewer of an engine PR reads this top to bottom: the summary line says whether anything
moved, then each class with the fact that moved, old -> new, and where the code is in each tree.
"""

from __future__ import annotations

from flowtrace.analysis.diff import KINDS, Change


def _value(v: object, field: str | None) -> str:
    if v is None:
        return "(absent)" if field == "support" else "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return str(v)


def _line(c: Change, ambiguous: set[str]) -> str:
    name = f"{c.cls} ({c.qualname.rpartition('.')[0].rpartition('.')[2]})" if c.cls in ambiguous else c.cls
    where = c.new_at if c.new_at and c.new_at == c.old_at else " -> ".join(x for x in (c.old_at, c.new_at) if x)
    what = f"{c.field}: {_value(c.old, c.field)} -> {_value(c.new, c.field)}"
    return f"  {c.kind:<8} {name:<40} {what}  [{where}]"


def diff_text(changes: tuple[Change, ...], old: str, new: str) -> str:
    counts = {k: sum(1 for c in changes if c.kind == k) for k in KINDS}
    classes = len({c.qualname for c in changes})
    if not changes:
        return f"no capture-support changes: {old} -> {new}\n"
    lines = [
        f"{old} -> {new}: {len(changes)} changes in {classes} classes ({counts['gained']} gained,"
        f" {counts['lost']} lost, {counts['changed']} changed)"
    ]
    qualnames: dict[str, set[str]] = {}
    for c in changes:
        qualnames.setdefault(c.cls, set()).add(c.qualname)
    ambiguous = {name for name, qs in qualnames.items() if len(qs) > 1}
    for kind in KINDS:
        lines += [_line(c, ambiguous) for c in changes if c.kind == kind]
    return "\n".join(lines) + "\n"

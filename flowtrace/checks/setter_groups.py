"""Model rows grouped by the setter that serves them (shared by FT009 and FT010)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from flowtrace.analysis.runner_calls import runner_verdicts
from flowtrace.checks.targets import conventions, is_target
from flowtrace.model import facts as F

if TYPE_CHECKING:
    from flowtrace.analysis.resolve import ModelRow
    from flowtrace.analysis.scan import ScanResult
    from flowtrace.model.links import CaptureChain

# (the setter's transform, the capture site): where a family of rows is served
SetterGroupKey = tuple[F.Location, F.Location]

PROBE_LAYERS = 32  # any realistic layer count works: reachability does not depend on it


def setter_groups(result: ScanResult) -> dict[SetterGroupKey, list[ModelRow]]:
    """Registered rows with a decidable capture path, grouped by (setter, site) so a base class
    shared by many registered subclasses is reported once. A row the runner's model check
    refuses raises for every id before its setter runs: no boundary of it is this family's
    question (its trace says where it raises)."""
    groups: dict[SetterGroupKey, list[ModelRow]] = {}
    cc = conventions(result)
    for row in result.rows:
        chain = setter_chain(row)
        if not row.registered or chain is None or chain.site is None or chain.site.point == F.UNKNOWN:
            continue
        if any(v.raises for v in runner_verdicts(result.project.lookup, row.qualname)):
            continue
        if not is_target(row, result.project, cc):
            continue  # a draft head or a non-generation model: never served an EAGLE-3 draft
        groups.setdefault((chain.transforms[0].location, chain.site.location), []).append(row)
    return groups


def served_rows(result: ScanResult) -> dict[F.Location, list[ModelRow]]:
    """Setter location -> the registered targets whose chain runs it (the classes a finding at
    that setter is graded over)."""
    cc = conventions(result)
    out: dict[F.Location, list[ModelRow]] = {}
    for row in result.rows:
        if row.chain is None or not row.registered or not is_target(row, result.project, cc):
            continue
        for link in row.chain.transforms:
            out.setdefault(link.location, []).append(row)
    return out


def setter_chain(row: ModelRow) -> CaptureChain | None:
    """The row's chain when its ids reach a setter (the rules below trace setter chains)."""
    chain = row.chain
    return chain if chain is not None and chain.source.kind == F.SourceKind.SETTER and chain.transforms else None


def joined_names(rows: Iterable[ModelRow]) -> str:
    names = sorted(r.name for r in rows)
    # A finding at the place to fix lists every class it affects (a dozen; beyond that the count).
    return ", ".join(names[:12]) + (f" and {len(names) - 12} more" if len(names) > 12 else "")

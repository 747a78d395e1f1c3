"""Capture sites that no setter of the class's own family feeds (shared by FT002 and FT018)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from flowtrace.analysis.graph import setter_written_holders
from flowtrace.checks.targets import conventions, family_writers, is_target

if TYPE_CHECKING:
    from flowtrace.analysis.class_lookup import ClassLookup
    from flowtrace.analysis.resolve import ModelRow
    from flowtrace.analysis.scan import ScanResult
    from flowtrace.model.facts import AttributeUseFact, CaptureSiteFact


def _holders(lookup: ClassLookup, row: ModelRow) -> list[str]:
    """The row's class and the classes it builds as attributes (where an unfed site may run)."""
    holders = [row.qualname] + [
        lookup.find_class(a.callee) for a in lookup.classes[row.qualname].assignments if a.attribute != "*"
    ]
    return [h for h in dict.fromkeys(holders) if h]


def _family_feed(result: ScanResult, row: ModelRow, site: CaptureSiteFact) -> list[AttributeUseFact]:
    """Another capture family's writes of the site's attribute from the row's classes, or from
    the models it builds (a wrapper's setter that hands the ids to its model's own setter). A site
    that reads a per-layer mark is fed by the family whose setter, on the class that runs the
    loop, writes its capture list (the same setter marks the layers it is handed)."""
    writers = family_writers(result, conventions(result))
    project = result.project
    classes = {q for h in _holders(project.lookup, row) for q in project.lookup.mro(h)}
    found = [u for q in sorted(classes) for u in writers.get(q, []) if u.attribute == site.attribute]
    if found or site.attribute in project.conv.attributes:
        return found
    own = project.lookup.mro(site.class_qualname)
    return [u for q in own for u in writers.get(q, []) if u.attribute in project.conv.attributes]


def unset_capture_sites(
    result: ScanResult, other_family: bool,
) -> Iterator[tuple[ModelRow, str, CaptureSiteFact, list[AttributeUseFact]]]:
    """(row, holder, site, family writes) for target rows without a setter whose holder captures."""
    project = result.project
    cc = conventions(result)
    fed = setter_written_holders(result.graph)  # holders some setter chain writes (graph query)
    reported: set[str] = set()
    for row in result.rows:
        if row.chain is not None or not is_target(row, project, cc):
            continue  # an id source sets the ids: a setter, or a config attribute, build context or hook
        for holder in _holders(project.lookup, row):
            if holder in fed or holder in reported:
                continue  # some registered class's setter feeds this loop: heads without a setter are fine
            site = project.holders.site_for(holder, set(project.conv.attributes))
            if site is None:
                continue
            feed = _family_feed(result, row, site)
            if bool(feed) == other_family:
                reported.add(holder)
                yield row, holder, site, feed
            break

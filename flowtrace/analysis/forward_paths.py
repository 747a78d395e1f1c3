"""Forward paths of a capturing model that run decoder layers without the capture.

A capturing forward may send some layers down a second routine for some batches (two-batch
overlap after the dense layers, every layer on split batches): the index records each such call
(:class:`flowtrace.model.facts.LayerRunFact`). A call that is not handed the collector runs its
layers without recording; on the batches that take it the draft gets fewer states than its fc has
slots (a fixed-slot packer raises at its count check; a list is concatenated short and the fc's
projection raises on the shape) — unless the engine never lets those batches run while a draft
is served (``[serving] speculative_excludes``). The batch flag the call's tests read names the
path (``[serving] batch_paths``: ``"can_run_tbo: two-batch overlap"``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flowtrace.analysis.last_memo import LastMemo
from flowtrace.model import facts as F
from flowtrace.model.links import CaptureChain, ForwardPathLink

if TYPE_CHECKING:
    from flowtrace.analysis.class_lookup import ClassLookup


def _path_words(project: ClassLookup, run: F.LayerRunFact) -> str | None:
    """The profile's words for the batch flag the call's tests read; None when every flag it
    reads is one the engine never sets while a draft is served."""
    named = dict(p.split(":", 1) for p in project.conv.batch_paths if ":" in p)
    named = {k.strip(): v.strip() for k, v in named.items()}
    flags = [f for f in run.flags if f in named]
    if any(f in project.conv.speculative_excludes for f in run.flags):
        return None
    if flags:
        return named[flags[0]]
    return f"`{run.condition}`" if run.condition else "every"


def _how(site: F.CaptureSiteFact, run: F.LayerRunFact) -> tuple[str, F.Location | None]:
    if site.container_sized_by and site.finalize_method:
        return (
            f"the collector sized by {site.container_sized_by} gets fewer states than it has slots and its "
            f"{site.finalize_method}() raises", site.finalize_at,
        )
    if run.whole:
        return "no layer is captured: the forward returns no aux states where the runner expects them and raises", None
    return (
        (
            f"the layers of {run.layers} are not captured: the draft's fc gets fewer states than it has slots and"
            " raises on the shape"
        ),
        None,
    )


def forward_paths(project: ClassLookup, chain: CaptureChain | None) -> tuple[ForwardPathLink, ...]:
    """The layer-running calls of the chain's capturing forward (link 8), each with the store
    the forward reads and whether the call records (see the module doc)."""
    site_link = chain.site if chain is not None else None
    if chain is None or site_link is None or site_link.owner is None:
        return ()
    site = next((s for s in project.sites.get(site_link.owner, []) if s.location == site_link.location), None)
    if site is None:
        return ()
    on = _on_while_capturing(project, chain, site)
    out = []
    for run in _runs(project).get((site.class_qualname, site.function), ()):
        words = None if on & set(run.off_while) else _path_words(project, run)
        how, at = _how(site, run) if not run.hands_capture else ("", None)
        out.append(ForwardPathLink(run, run.hands_capture, site.attribute, site.location, words, how, at))
    return tuple(out)


def _on_while_capturing(project: ClassLookup, chain: CaptureChain, site: F.CaptureSiteFact) -> set[str]:
    """Attributes that hold something truthy whenever the chain's capture is on: the indices the
    site reads (a draft names at least one state) and the flags the chain's setters set to True.
    A call whose tests need one of them falsy (``if batch.overlap and not self.<attr>:``) never
    runs while this method's draft is served."""
    on = {site.attribute} if site.attribute else set()
    for link in chain.transforms:
        setter = project.setters.get(link.owner, {}).get(link.method)
        on |= set(setter.switches) if setter is not None else set()
    return on


_LayerRuns = dict[tuple[str, str], list[F.LayerRunFact]]
_RUNS: LastMemo[ClassLookup, _LayerRuns] = LastMemo()


def _runs(project: ClassLookup) -> _LayerRuns:
    """The project's layer-running calls by (class, method), read once per project."""
    return _RUNS.get(project, _read_runs)


def _read_runs(project: ClassLookup) -> _LayerRuns:
    found: _LayerRuns = {}
    for ff in project.files:
        for run in ff.layer_runs:
            found.setdefault((run.class_qualname, run.function), []).append(run)
    return found


__all__ = ["forward_paths"]

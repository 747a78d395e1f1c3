"""Assemble one :class:`flowtrace.model.links.CaptureChain` per model row (shared/DESIGN.md §3).

Resolution (:mod:`flowtrace.analysis.resolve`, :mod:`flowtrace.analysis.config_capture`)
finds the pieces of a capture path; this module turns them into the seven typed links, each
with the file:line it rests on. The graph stores these links, and trace, the checks and the
renderers read them, so every consumer sees the same chain instead of re-deriving it from
the row's flat fields.

It imports neither module above (``resolve`` calls it while building rows): it reads a
:class:`flowtrace.analysis.capture.Capture` / ``SourceCapture`` by their fields and the
project through :class:`ChainProject`.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from flowtrace.model import facts as F
from flowtrace.model.links import (
    CaptureChain,
    ConcatLink,
    HolderLink,
    IdSourceLink,
    Problem,
    SiteLink,
    TransformLink,
)

if TYPE_CHECKING:
    from flowtrace.analysis.capture import Capture


class ChainProject(Protocol):
    """What a chain reads of the project (:class:`flowtrace.analysis.resolve.Project`): its
    classes, for the holder's location, and its concatenation index."""

    @property
    def classes(self) -> Mapping[str, F.ClassFact]: ...

    @property
    def concats(self) -> ConcatIndex: ...


# -- concat candidates, shared by every chain of one project ------------------------------


@dataclass(frozen=True, slots=True)
class ConcatIndex:
    """Where a scan concatenates captured states: per module, and the draft modules
    (those defining a draft fc), in file order; built once per project."""

    by_module: dict[str, tuple[F.Location, ...]]
    draft_modules: frozenset[str]
    draft_sites: tuple[F.Location, ...]

    @classmethod
    def of(cls, files: tuple[F.FileFacts, ...]) -> ConcatIndex:
        by_module: dict[str, list[F.Location]] = {}
        drafts: set[str] = set()
        draft_sites: list[F.Location] = []
        for ff in files:
            if ff.fc_definitions:
                drafts.add(ff.module)
                draft_sites += [c.location for c in ff.concat_sites]
            by_module.setdefault(ff.module, []).extend(c.location for c in ff.concat_sites)
        return cls({m: tuple(v) for m, v in by_module.items()}, frozenset(drafts), tuple(draft_sites))

    def chosen(self, holder: str | None) -> F.Location | None:
        """The concatenation the states reach: the holder's module first, else a draft
        module's (what the trace cites); None rather than a guess."""
        module = (holder or "").rpartition(".")[0]
        own = self.by_module.get(module, ())
        if own:
            return own[0]
        return self.draft_sites[0] if self.draft_sites else None

    def candidates(self, site_module: str) -> tuple[F.Location, ...]:
        """Every concatenation the site's states may reach: its own module's and the draft
        modules' (the graph draws an edge to each)."""
        own = self.by_module.get(site_module, ())
        return tuple(dict.fromkeys((*own, *self.draft_sites)))


def mechanism(text: str) -> F.Mechanism:
    """The typed mechanism of a site fact (``unknown`` for a spelling no link kind names)."""
    try:
        return F.Mechanism(text)
    except ValueError:
        return F.Mechanism.UNKNOWN


# -- a setter-driven chain -----------------------------------------------------------------


def setter_chain(project: ChainProject, qualname: str, capture: Capture) -> CaptureChain:
    """The links of a row whose ids reach an entry setter (link 1 is that setter's entry)."""
    first = capture.setter
    site = capture.site
    return CaptureChain(
        source=IdSourceLink(F.SourceKind.SETTER, None, first.location),
        transforms=_transforms(qualname, capture),
        holder=_holder(project, capture),
        site=_site(capture) if site is not None else None,
        stream=capture.stream,
        slots=capture.slots,
        returns=getattr(capture, "returns", None),  # added by the return-path resolution
        concat=_concat(project, capture.holder, site) if site is not None else None,
        problems=tuple(capture.issues),
    )


def _transforms(qualname: str, capture: Capture) -> tuple[TransformLink, ...]:
    """Link 2: one link per setter followed, outermost first, with the object it acts on."""
    targets = capture.chain_targets or (qualname,) * len(capture.chain)
    out = []
    for n, setter in enumerate(capture.chain):
        acts_on = targets[n] if n < len(targets) else qualname
        out.append(
            TransformLink(
                owner=setter.class_qualname,
                method=setter.method,
                acts_on=acts_on,
                transform=F.Transform(setter.id_transform),
                note=setter.transform_note,
                default=setter.default_layers,
                location=setter.location,
            )
        )
    return tuple(out)


def _attribute(capture: Capture) -> str | None:
    """The capture attribute: what the site tests, else the last name a setter writes."""
    if capture.site is not None and capture.site.attribute:
        return capture.site.attribute
    return next((w.rsplit(".", 1)[-1] for s in capture.chain for w in s.writes), None)


def _holder(project: ChainProject, capture: Capture) -> HolderLink | None:
    """Link 3: the holder class and how it is built; a dynamic holder names its config key
    and the construction that reads it."""
    if capture.depends_on:
        where = next((p.location for p in capture.issues if p.kind == F.ProblemKind.DEPENDS_ON_CONFIG), None)
        return HolderLink(None, F.HolderKind.DYNAMIC, _attribute(capture), where or capture.setter.location, capture.depends_on)
    if capture.holder is None:
        return None
    return HolderLink(capture.holder, capture.holder_kind, _attribute(capture), _class_location(project, capture.holder))


def _class_location(project: ChainProject, qualname: str | None) -> F.Location | None:
    cls = project.classes.get(qualname) if qualname else None
    return cls.location if cls is not None else None


def _site(capture: Capture) -> SiteLink:
    """Link 4, with the point resolution decided (callback sites followed into the layer)."""
    site = capture.site
    assert site is not None
    return SiteLink(
        mechanism=mechanism(site.mechanism),
        point=F.Point(capture.point),
        function=site.function,
        location=site.location,
        note=capture.point_note,
        evidence=capture.point_evidence,
        attribute=site.attribute,
        loop_variable=site.loop_variable,
        loop_range=site.loop_range,
        container=site.container,
        embedding_capturable=capture.embedding_capturable,
        last_layer_capturable=capture.last_layer_capturable,
        owner=site.class_qualname,
    )


def _concat(project: ChainProject, holder: str | None, site: F.CaptureSiteFact) -> ConcatLink:
    """Link 7: the order the states are read back, a post-loop last-layer capture, and the
    concatenation(s) they reach."""
    index = project.concats
    return ConcatLink(
        order=F.ConcatOrder(site.concat_order),
        last_layer_at=site.post_loop_at,
        location=index.chosen(holder),
        candidates=index.candidates(site.class_qualname.rpartition(".")[0]),
    )


# -- a setter-less chain (config_capture.SourceCapture) ------------------------------------

_SOURCE_KINDS = {"config": F.SourceKind.CONFIG_ATTRIBUTE, "context": F.SourceKind.BUILD_CONTEXT, "hook": F.SourceKind.SERVING_CONFIG}


def source_chain(project: ChainProject, src: Any) -> CaptureChain:
    """The links of a setter-less path: the id source the engine reads, the builder that
    writes the layout it serves (transform ``ignored``), the holder and the site."""
    site = src.site
    problems = tuple(Problem(F.ProblemKind.NO_CAPTURE_SITE, text, src.location) for text in src.problems)
    return CaptureChain(
        source=IdSourceLink(_SOURCE_KINDS.get(src.kind, F.SourceKind.NONE), src.key, src.location),
        transforms=_builder_transform(src),
        holder=HolderLink(src.holder, F.HolderKind.DIRECT, getattr(src.source, "attribute", None), _class_location(project, src.holder) or src.location),
        site=_source_site(src) if site is not None else None,
        stream=None,
        slots=None,
        returns=None,
        concat=_source_concat(project, src) if site is not None else None,
        problems=problems,
    )


def _builder_transform(src: Any) -> tuple[TransformLink, ...]:
    """A config builder that writes the engine's own layout: the draft's ids are ignored."""
    builder, write = src.builder, src.write
    if builder is None:
        return ()
    return (
        TransformLink(
            owner=builder.class_qualname,
            method=write.key if write is not None else "",
            acts_on=src.holder,
            transform=F.Transform.IGNORED,
            note=write.expression if write is not None else None,
            default=None,
            location=write.location if write is not None else builder.location,
        ),
    )


def _source_concat(project: ChainProject, src: Any) -> ConcatLink:
    """The order a setter-less path reads the states back (``sorted`` is layer order) and a
    post-final-norm capture of b=L."""
    index = project.concats
    order = F.ConcatOrder.CONFIG if src.concat_order == "config" else F.ConcatOrder.LOOP
    owner = getattr(src.site, "class_qualname", src.holder)
    return ConcatLink(order, src.post_norm_site, index.chosen(src.holder), index.candidates(owner.rpartition(".")[0]))


def _source_site(src: Any) -> SiteLink:
    site = src.site
    return SiteLink(
        mechanism=mechanism(src.mechanism),
        point=F.Point(src.point),
        function=getattr(site, "function", ""),
        location=site.location,
        note=src.point_note,
        attribute=getattr(site, "attribute", None),
        owner=getattr(site, "class_qualname", None),
    )


__all__ = ["ConcatIndex", "setter_chain", "source_chain"]

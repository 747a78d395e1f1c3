"""Assemble one :class:`flowtrace.model.links.CaptureChain` per model row (docs/architecture.md).

Resolution (:mod:`flowtrace.analysis.resolve` for setters, :mod:`flowtrace.analysis.config_capture`
for config attributes, build contexts and serving-config hooks) finds the pieces of a capture
path; this module turns either into the same typed links, each with the file:line it rests on.
The row keeps only the chain (and a setter path's resolution), so the graph, the tracer, compat,
the checks and the renderers all read one model instead of re-deriving it from the facts.

It imports neither module above (``resolve`` calls it while building rows): it reads a
:class:`flowtrace.analysis.capture.Capture` / ``SourceCapture`` by their typed fields and the
project through :class:`ChainProject`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from flowtrace.model import facts as F
from flowtrace.model.links import (
    CaptureChain,
    ConcatLink,
    Decision,
    DefaultLink,
    FirstIteration,
    HolderLink,
    IdSourceLink,
    LayoutLink,
    Problem,
    Production,
    ProductionLink,
    ServingLink,
    SiteLink,
    StoreKind,
    TransformLink,
    Unmatched,
)

if TYPE_CHECKING:
    from flowtrace.analysis.capture import Capture
    from flowtrace.analysis.class_lookup import ClassLookup
    from flowtrace.analysis.config_capture import SourceCapture
    from flowtrace.engines.profiles import Conventions


class ChainProject(Protocol):
    """What a chain reads of the project (:class:`flowtrace.analysis.resolve.Project`): its
    class lookup, for the holder's location, its concatenation index, and the profile's words
    (capture attributes, post-final-norm ids)."""

    @property
    def lookup(self) -> ClassLookup: ...

    @property
    def conv(self) -> Conventions: ...

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
        production=ProductionLink(Production.SETTER_CHAIN, _transforms(qualname, capture)),
        holder=_holder(project, capture),
        site=_site(capture) if site is not None else None,
        stream=capture.stream,
        slots=capture.slots,
        returns=getattr(capture, "returns", None),  # added by the return-path resolution
        concat=_concat(project, capture.holder, site) if site is not None else None,
        problems=tuple(capture.issues),
        serving=ServingLink(unread=capture.unread),
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


def _store(project: ChainProject, capture: Capture) -> StoreKind:
    """What the setters write where the site reads it: the capture attribute itself, or a
    per-layer flag the site reads instead (the setter marked ``self.layers[i]``)."""
    site = capture.site
    if site is not None and site.attribute and site.attribute not in project.conv.attributes:
        return StoreKind.LAYER_MARKS
    return StoreKind.ATTRIBUTE


def _holder(project: ChainProject, capture: Capture) -> HolderLink | None:
    """Link 3: the holder class and how it is built; a dynamic holder names its config key
    and the construction that reads it."""
    store = _store(project, capture)
    if capture.depends_on:
        where = next((p.location for p in capture.issues if p.kind == F.ProblemKind.DEPENDS_ON_CONFIG), None)
        location = where or capture.setter.location
        return HolderLink(None, F.HolderKind.DYNAMIC, _attribute(capture), location, capture.depends_on, store)
    if capture.holder is None:
        return None
    built_at = _class_location(project, capture.holder)
    return HolderLink(capture.holder, capture.holder_kind, _attribute(capture), built_at, store=store)


def _class_location(project: ChainProject, qualname: str | None) -> F.Location | None:
    cls = project.lookup.classes.get(qualname) if qualname else None
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
        captured_expression=site.captured_expression,
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

_SOURCE_KINDS = {
    F.IdSourceKind.CONFIG: (F.SourceKind.CONFIG_ATTRIBUTE, StoreKind.CONFIG_ATTRIBUTE),
    F.IdSourceKind.CONTEXT: (F.SourceKind.BUILD_CONTEXT, StoreKind.CONTEXT_FIELD),
    F.IdSourceKind.HOOK: (F.SourceKind.SERVING_CONFIG, StoreKind.METADATA),
}


def source_chain(project: ChainProject, src: SourceCapture) -> CaptureChain:
    """The links of a setter-less path: the id source the engine reads (never the draft's
    ids), how it produces them (a builder's layout, or the serving ids), the holder, the site
    and how the states are read back."""
    kind, store = _SOURCE_KINDS[src.kind]
    problems = tuple(Problem(F.ProblemKind.NO_CAPTURE_SITE, text, src.location) for text in src.problems)
    attribute = src.source.attribute if src.source is not None else None
    return CaptureChain(
        source=IdSourceLink(kind, src.key, src.location),
        production=_production(src),
        holder=HolderLink(
            src.holder,
            F.HolderKind.DIRECT,
            attribute,
            _class_location(project, src.holder) or src.location,
            store=store,
        ),
        site=_source_site(src) if src.site is not None else None,
        stream=None,
        slots=None,
        returns=None,
        concat=_source_concat(project, src),
        problems=problems,
        serving=ServingLink(modes=src.modes),
    )


def _production(src: SourceCapture) -> ProductionLink:
    """Link 2 of a setter-less path: a builder that writes the engine's own layout (the
    draft's ids are ignored), or the serving ids with the metadata's default."""
    decision = Decision(src.outcome, src.reason, src.reason_location)
    if src.kind is F.IdSourceKind.HOOK:
        d = src.default
        default = DefaultLink(d.class_qualname, d.method, d.attribute, d.source, d.location) if d is not None else None
        return ProductionLink(Production.SERVING_IDS, default=default, decision=decision)
    w, builder = src.write, src.builder
    layout = None
    if w is not None:
        layout = LayoutLink(
            w.key, w.expression, w.condition, w.bindings, w.location, builder.class_qualname if builder else None
        )
    return ProductionLink(Production.BUILDER_LAYOUT, _builder_transform(src), layout=layout, decision=decision)


def _builder_transform(src: SourceCapture) -> tuple[TransformLink, ...]:
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


def _source_concat(project: ChainProject, src: SourceCapture) -> ConcatLink:
    """How a setter-less path reads the states back: in its order (``sorted``: one buffer
    slot per id, ascending), a dict's concatenation by key (an id never stored raises), a
    buffer whose unwritten slots are read all the same, the post-final-norm ids (hooks)."""
    site = src.site
    hook = src.kind is F.IdSourceKind.HOOK
    if src.mechanism == F.DICT_STORE:
        unmatched = Unmatched.RAISES
    else:
        unmatched = Unmatched.EMPTY_SLOT if hook else Unmatched.DROPPED
    post = project.conv.post_norm_ids if hook else ()
    owner = site.class_qualname if site is not None else src.holder
    return ConcatLink(
        order=src.concat_order,
        last_layer_at=None,
        location=site.concat if isinstance(site, F.DictCaptureFact) else None,
        candidates=project.concats.candidates(owner.rpartition(".")[0]) if site is not None else (),
        unmatched=unmatched,
        post_norm_ids=tuple(post),
        post_norm_at=src.post_norm_site,
    )


def _capturability(src: SourceCapture) -> tuple[bool | None, bool | None]:
    """(embedding, last layer) of a setter-less site. A capture loop knows both; a metadata
    hook called after layer i's feed-forward records b = i + 1, so b = 0 can never be asked
    for (the post-norm id is no boundary) and b = L is id L - 1; a dict store keyed by layer
    records the layer's input or output the same way; an unknown point decides neither."""
    site = src.site
    if isinstance(site, F.CaptureSiteFact):
        return site.embedding_capturable, site.last_layer_capturable
    if src.point not in (F.INPUT, F.OUTPUT):
        return None, None
    return src.point == F.INPUT, src.point == F.OUTPUT


def _first_iteration(site: F.CaptureSiteFact | F.DictCaptureFact | F.HookCallFact) -> FirstIteration | None:
    """The index a capture loop meets at its first iteration, when recording it adds an
    operand that is still None there (TypeError)."""
    if not isinstance(site, F.CaptureSiteFact) or not site.first_none or site.label_offset is None:
        return None
    return FirstIteration(site.label_offset, site.first_none, site.stored_at or site.location)


def _source_site(src: SourceCapture) -> SiteLink:
    site = src.site
    assert site is not None
    emb, last = _capturability(src)
    loop = site if isinstance(site, F.CaptureSiteFact) else None
    return SiteLink(
        mechanism=mechanism(src.mechanism or ""),
        point=F.Point(src.point),
        function=site.function,
        location=site.location,
        note=src.point_note,
        attribute=site.attribute if not isinstance(site, F.HookCallFact) else None,
        loop_range=loop.loop_range if loop is not None else None,
        embedding_capturable=emb,
        last_layer_capturable=last,
        owner=site.class_qualname,
        captured_expression=loop.captured_expression if loop is not None else None,
        first_iteration=_first_iteration(site),
    )


__all__ = ["ConcatIndex", "setter_chain", "source_chain"]

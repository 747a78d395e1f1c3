"""Cross-file resolution: from per-file facts to one row per model class.

Per-file facts cannot say whether a registered class can capture: its setter may live on a
base class in another file, hand the ids to ``self.language_model``, or to a holder found
only through the attributes built in ``__init__``. Classes are linked by qualified name
(falling back to a unique simple name) and bases walked depth-first in ``class_lookup``;
attribute construction and the capture point of callback sites (how the layer's forward uses
the callback, a :class:`flowtrace.model.facts.CallbackUse`) are decided in ``holders``;
delegation is followed in ``capture_assembly``; registry entries are read in ``registries``.
This module holds those parts (composed, each on the parts below it) and makes the rows.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from flowtrace.analysis.capture import Capture
from flowtrace.analysis.capture_assembly import CaptureAssembly
from flowtrace.analysis.class_lookup import ClassLookup
from flowtrace.analysis.holders import Holders
from flowtrace.analysis.registries import Registries
from flowtrace.analysis.chain import ConcatIndex, setter_chain, source_chain
from flowtrace.analysis.config_capture import SourceCapture, opts_in, resolve_source
from flowtrace.analysis.serving import serving_link
from flowtrace.engines.profiles import Conventions
from flowtrace.model import facts as F
from flowtrace.model.links import NOT_BREAKING, CaptureChain

SUPPORTED, INHERITED, DELEGATED, CONDITIONAL, BROKEN, NONE = (
    F.Support.SUPPORTED,
    F.Support.INHERITED,
    F.Support.DELEGATED,
    F.Support.CONDITIONAL,
    F.Support.BROKEN,
    F.Support.NONE,
)


@dataclass(frozen=True, slots=True)
class ModelRow:
    name: str
    qualname: str
    location: F.Location
    registered: bool
    architectures: tuple[str, ...]
    generation_target: bool  # registered where the engine serves text generation (EAGLE-3 applies)
    support: str
    capture: Capture | None  # a setter-driven path's resolution (its setters, holder, site facts)
    # The capture model (flowtrace.model.links): the typed links of whatever id source the row
    # has (a setter, a config attribute, a build context, the serving config); what the graph
    # stores and trace, compat, the checks and the renderers read. None: no id source at all.
    chain: CaptureChain | None = None
    # Chains for further speculative methods a profile declares (each names its method in
    # CaptureChain.method); ``chain`` answers for EAGLE-3. Empty until such a method is traced.
    method_chains: tuple[CaptureChain, ...] = ()


class Project:
    """All facts of one scan, its parts, and the rows they make.

    Each concern is one part, built from only the parts below it, so a reader (a rule, the
    tracer) can tell by the attribute it names which facts it rests on:

    - :attr:`lookup`, a :class:`~flowtrace.analysis.class_lookup.ClassLookup`: facts by
      class, which class a written name means, base order;
    - :attr:`holders`, a :class:`~flowtrace.analysis.holders.Holders` on the lookup: what
      instances build and hold, capture sites and points;
    - :attr:`captures`, a :class:`~flowtrace.analysis.capture_assembly.CaptureAssembly` on
      both: a setter's delegation followed to its capture;
    - :attr:`registries`, a :class:`~flowtrace.analysis.registries.Registries` on the
      lookup: which classes are registered, under which architectures, for generation.

    ``Project`` itself keeps its inputs (:attr:`files`, :attr:`conv`) and makes the rows:
    one per model class, with its typed chain (a setter's capture or a setter-less source,
    then the serving link, read off the lookup).
    """

    def __init__(self, files: tuple[F.FileFacts, ...], conv: Conventions) -> None:
        self.files = files
        self.conv = conv
        self.lookup = ClassLookup(files, conv)
        self.holders = Holders(self.lookup)
        self.captures = CaptureAssembly(self.lookup, self.holders)
        self.registries = Registries(self.lookup)

    @cached_property
    def concats(self) -> ConcatIndex:
        """Where the scan concatenates captured states (the concat links read it)."""
        return ConcatIndex.of(self.files)

    def chain_of(self, qualname: str, capture: Capture | None, source: SourceCapture | None) -> CaptureChain | None:
        """The typed links of a row's capture path (setter-driven or setter-less), link 8
        (the serving path) completed once the others are known."""
        if capture is not None:
            chain = setter_chain(self, qualname, capture)
        elif source is not None:
            chain = source_chain(self, source)
        else:
            return None
        return replace(chain, serving=serving_link(self.lookup, chain))

    @cached_property
    def rows(self) -> tuple[ModelRow, ...]:
        """One row per model class: every class with a capture path or a registry entry,
        but not the engine's own interfaces and mixins (they provide capture; no model)."""
        registered = self.registries.architectures
        providers = self.conv.interfaces | self.conv.holders
        out: list[ModelRow] = []
        for qualname, cls in sorted(self.lookup.classes.items()):
            if cls.name in providers:
                continue
            capture = self.captures.resolve_capture(qualname)
            source = self._source(qualname) if capture is None else None
            if capture is None and source is None and qualname not in registered:
                continue
            out.append(self._row(qualname, cls, capture, source))
        return tuple(out)

    def _row(
        self, qualname: str, cls: F.ClassFact, capture: Capture | None, source: SourceCapture | None
    ) -> ModelRow:
        """The class's row: its chain (named for the method when it is not the default) and
        what the registries say of it."""
        chain = self.chain_of(qualname, capture, source)
        if chain is not None and self.conv.method is not None and not self.conv.method.default:
            chain = replace(chain, method=self.conv.method.name)  # a chain names a method other than the default
        return ModelRow(
            name=cls.name,
            qualname=qualname,
            location=cls.location,
            registered=qualname in self.registries.architectures,
            architectures=self.registries.architectures.get(qualname, ()),
            generation_target=qualname in self.registries.generation,
            support=self.support_of(qualname, chain),
            capture=capture,
            chain=chain,
        )

    def support_of(self, qualname: str, chain: CaptureChain | None) -> str:
        """A row's support word, read off its chain: conditional on the target config (a
        dynamic holder link), broken (a breaking problem kind or no site link), delegated (the
        entry setter hands the ids on), inherited (the entry setter is a base class's). A
        source other than a setter is supported when it states that it captures, a site
        records and nothing is wrong on the way."""
        if chain is None:
            return NONE
        if not chain.setter_driven:
            decision = chain.production.decision
            captures = decision is not None and decision.outcome == F.Outcome.CAPTURES
            return SUPPORTED if captures and chain.site is not None and not chain.problems else BROKEN
        if not chain.transforms:
            return NONE
        entry = chain.transforms[0]
        if chain.holder is not None and chain.holder.depends_on:
            return CONDITIONAL
        if chain.kinds() - NOT_BREAKING or chain.site is None:
            return BROKEN
        if self.lookup.setters[entry.owner][entry.method].delegate:
            return DELEGATED
        return INHERITED if entry.owner != qualname else SUPPORTED

    def _source(self, qualname: str) -> SourceCapture | None:
        """The setter-less capture path of a registered class, or of a class that opts in
        through a profile-named base (see config_capture)."""
        architectures = self.registries.architectures
        if qualname not in architectures and not opts_in(self.lookup, qualname):
            return None
        return resolve_source(self.holders, qualname, architectures.get(qualname, ()))

    def row(self, name: str) -> ModelRow | None:
        """A row by qualified name, simple class name, or registered architecture."""
        rows = self.rows
        for r in rows:
            if r.qualname == name:
                return r
        # Several classes may share a name or an architecture (a diffusion or encoder copy in
        # another subpackage): prefer registered classes that can capture.
        def preference(r: ModelRow) -> tuple[bool, bool, bool, str]:
            return (not r.registered, r.capture is None, r.name != name, r.qualname)

        by_simple = sorted((r for r in rows if r.name == name), key=preference)
        by_arch = sorted((r for r in rows if name in r.architectures), key=preference)
        if by_simple and (not by_arch or preference(by_simple[0]) <= preference(by_arch[0])):
            return by_simple[0]
        return by_arch[0] if by_arch else None

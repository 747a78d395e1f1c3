"""Cross-file resolution: from per-file facts to one row per model class.

Per-file facts cannot say whether a registered class can capture: its setter may live on a
base class in another file, hand the ids to ``self.language_model``, or to a holder found
only through the attributes built in ``__init__``. This module links classes by qualified
name (falling back to a unique simple name), walks bases depth-first, follows delegation
and attribute construction, and decides the capture point of callback sites by looking up
how the layer's forward uses the callback (a :class:`flowtrace.model.facts.CallbackUse`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from flowtrace.model import facts as F
from flowtrace.engines.profiles import Conventions

SUPPORTED, INHERITED, DELEGATED, BROKEN, NONE = "supported", "inherited", "delegated", "broken", "none"


@dataclass(frozen=True, slots=True)
class Capture:
    setter: F.SetterFact
    inherited: bool
    id_transform: str
    transform_note: str | None
    effective_transform: str
    delegates_to: str | None
    default_layers: str | None
    default_location: F.Location | None
    holder: str | None  # class that holds the capture attribute and runs the capture loop
    site: F.CaptureSiteFact | None
    point: str
    point_note: str
    point_evidence: tuple[F.Location, ...]
    embedding_capturable: bool | None
    last_layer_capturable: bool | None
    chain: tuple[F.SetterFact, ...]  # setters followed, outermost first
    problems: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ModelRow:
    name: str
    qualname: str
    location: F.Location
    registered: bool
    architectures: tuple[str, ...]
    generation_target: bool  # registered where the engine serves text generation (EAGLE-3 applies)
    support: str
    capture: Capture | None
    # A capture path without a setter (config attribute, build context, metadata hook):
    # a flowtrace.analysis.config_capture.SourceCapture, when capture is None.
    source: object | None = None


def compose(outer: str, inner: str) -> str:
    """The transform of ``inner(outer(ids))``: identity and pure delegation are neutral."""
    if outer in (F.IDENTITY, F.DELEGATES):
        return inner
    if inner in (F.IDENTITY, F.DELEGATES):
        return outer
    if F.CONDITIONAL in (outer, inner):
        return F.CONDITIONAL
    return F.OTHER


class Project:
    """All facts of one scan, indexed for lookups by class."""

    def __init__(self, files: tuple[F.FileFacts, ...], conv: Conventions) -> None:
        self.files = files
        self.conv = conv
        self.classes: dict[str, F.ClassFact] = {}
        self.by_name: dict[str, list[str]] = {}
        self.setters: dict[str, dict[str, F.SetterFact]] = {}
        self.getters: dict[str, F.DefaultGetterFact] = {}
        self.sites: dict[str, list[F.CaptureSiteFact]] = {}
        self.callbacks: dict[str, list[F.CallbackUse]] = {}
        self.registry: dict[str, list[F.RegistryFact]] = {}
        self._mro_cache: dict[str, list[str]] = {}
        for ff in files:
            for c in ff.classes:
                self.classes.setdefault(c.qualname, c)
                self.by_name.setdefault(c.name, []).append(c.qualname)
            for s in ff.setters:
                self.setters.setdefault(s.class_qualname, {})[s.method] = s
            for g in ff.default_getters:
                self.getters.setdefault(g.class_qualname, g)
            for site in ff.capture_sites:
                self.sites.setdefault(site.class_qualname, []).append(site)
            for cb in ff.callback_uses:
                self.callbacks.setdefault(cb.parameter, []).append(cb)
            for r in ff.registry:
                self.registry.setdefault(r.target, []).append(r)

    # -- class lookups -----------------------------------------------------------
    def find_class(self, name: str) -> str | None:
        if name in self.classes:
            return name
        if name.startswith("arch:"):  # a factory given an architecture name: ask the registry
            for target, entries in self.registry.items():
                if any(e.architecture == name[5:] for e in entries):
                    return self.find_class(target) if not target.startswith("arch:") else None
            return None
        simple = name.rsplit(".", 1)[-1]
        candidates = self.by_name.get(simple, [])
        if len(candidates) == 1:
            return candidates[0]
        # Prefer a candidate in the module the name points at (re-exports, relative imports).
        module = name.rpartition(".")[0]
        close = [c for c in candidates if module and c.startswith(module.rpartition(".")[0])]
        return close[0] if len(close) == 1 else None

    def mro(self, qualname: str) -> list[str]:
        """Depth-first base order (memoised: the facts never change after indexing)."""
        cached = self._mro_cache.get(qualname)
        if cached is None:
            cached = self._mro_cache[qualname] = self._compute_mro(qualname)
        return list(cached)

    def _compute_mro(self, qualname: str) -> list[str]:
        order: list[str] = []

        def visit(q: str, depth: int) -> None:
            if q in order or depth > 30:
                return
            order.append(q)
            cls = self.classes.get(q)
            if cls is None:
                return
            for base in cls.bases:
                found = self.find_class(base)
                if found:
                    visit(found, depth + 1)

        visit(qualname, 0)
        return order

    def find_setter(self, qualname: str, names: tuple[str, ...] | None = None) -> F.SetterFact | None:
        mro = self.mro(qualname)
        for name in names or self.conv.setter_order:
            for q in mro:
                setter = self.setters.get(q, {}).get(name)
                if setter is not None:
                    return setter
        return None

    def attribute_class(self, qualname: str, attribute: str) -> str | None:
        for q in self.mro(qualname):
            cls = self.classes.get(q)
            if cls is None:
                continue
            for a in cls.assignments:
                if a.attribute == attribute:
                    found = self.find_class(a.callee)
                    if found:
                        return found
        return None

    def constructed(self, qualname: str) -> list[str]:
        out: list[str] = []
        for q in self.mro(qualname):
            cls = self.classes.get(q)
            if cls:
                for a in cls.assignments:
                    found = self.find_class(a.callee)
                    if found and found not in out:
                        out.append(found)
        return out

    def holder_for_method(self, qualname: str, method: str) -> str | None:
        """The object a setter hands ids to through a local (``holder = getattr(...)``): the
        class itself or an attribute class (two levels deep) that defines ``method``."""
        def defines(q: str) -> bool:
            return any(method in self.setters.get(c, {}) for c in self.mro(q))

        if defines(qualname):
            return qualname
        frontier = [qualname]
        for _ in range(2):
            nxt = []
            for q in frontier:
                for cls_q in self.mro(q):
                    cls = self.classes.get(cls_q)
                    for a in cls.assignments if cls else ():
                        if a.attribute == "*":
                            continue
                        found = self.find_class(a.callee)
                        if found and defines(found):
                            return found
                        if found:
                            nxt.append(found)
            frontier = nxt
        return None

    def site_for(self, holder: str, attribute_hint: set[str]) -> F.CaptureSiteFact | None:
        """The capture site the holder really runs: a base class's site is skipped when a class
        earlier in the order overrides that method (its forward replaces the capturing one)."""
        overridden: set[str] = set()
        for q in self.mro(holder):
            sites = [s for s in self.sites.get(q, []) if s.function.split(".")[-1] not in overridden]
            cls = self.classes.get(q)
            if cls is not None:
                overridden.update(cls.methods)
            ranked = sorted(sites, key=lambda s: (s.function.split(".")[-1] != "forward", s.attribute not in attribute_hint, s.location.line))
            if ranked:
                return ranked[0]
        return None

    def callback_point(self, holder: str, site: F.CaptureSiteFact) -> tuple[str, str, tuple[F.Location, ...]]:
        """Decide input/output for a callback site by how the layer's forward uses the callback."""
        param = site.callback_parameter
        if not param:
            return F.UNKNOWN, site.note, ()
        uses = [u for u in self.callbacks.get(param, []) if u.function == "forward"]
        if not uses:
            return F.UNKNOWN, f"no layer forward takes a '{param}' parameter; cannot follow the callback", ()
        built = set(self.constructed(holder))
        preferred = [u for u in uses if u.class_qualname in built]
        module = holder.rpartition(".")[0]
        same_module = [u for u in uses if u.class_qualname.rpartition(".")[0] == module]
        chosen = preferred or same_module or (uses if len({u.position for u in uses}) == 1 else [])
        if not chosen:
            return F.UNKNOWN, f"several layer classes take '{param}' and use it differently; cannot tell which runs here", ()
        use = chosen[0]
        where = f"{use.class_qualname.rsplit('.', 1)[-1]}.forward"
        if not (preferred or same_module):
            where = f"every layer forward taking '{param}' ({len(uses)} classes, e.g. {where})"
        via = f" via {use.handed_to}" if use.handed_to and use.handed_to != "called" else ""
        if use.position == "before":
            return F.INPUT, f"{where} uses {param}{via} before its first sub-module call: records the layer's input", (use.location,)
        if use.position == "after":
            return F.OUTPUT, f"{where} uses {param}{via} after its last sub-module call: records the layer's output", (use.location,)
        return F.UNKNOWN, f"{where} uses {param}{via} between sub-module calls; neither input nor output", (use.location,)

    def _holder_from_writes(self, qualname: str, setter: F.SetterFact, problems: list[str]) -> str | None:
        """The class whose attribute the setter writes: ``self.attr`` -> this class,
        ``self.model.attr`` -> the class built as ``self.model``."""
        for write in setter.writes:
            parts = write.split(".")
            if len(parts) == 2 and parts[0] == "self":
                return qualname
            if len(parts) == 3 and parts[0] == "self":
                holder = self.attribute_class(qualname, parts[1])
                if holder is None:
                    problems.append(f"cannot resolve the class of self.{parts[1]} written by the setter")
                return holder
        return None

    # -- the capture path ----------------------------------------------------------
    def resolve_capture(self, qualname: str, depth: int = 0, names: tuple[str, ...] | None = None) -> Capture | None:
        setter = self.find_setter(qualname, names)
        if setter is None or depth > 4:
            return None
        inherited = setter.class_qualname != qualname
        problems: list[str] = []
        chain = [setter]
        effective = setter.id_transform
        delegates_to = None
        holder: str | None = None
        inner: Capture | None = None
        if setter.delegate:
            target = None
            if setter.delegate.startswith("self.") and setter.delegate.count(".") == 1:
                target = self.attribute_class(qualname, setter.delegate[5:])
            elif setter.delegate == "self":
                target = qualname
            elif setter.delegate == "super()" and setter.delegate_method:
                # the base class's version of the method, still acting on this object
                base = next((q for q in self.mro(setter.class_qualname)[1:] if setter.delegate_method in self.setters.get(q, {})), None)
                if base is not None:
                    inner_setter = self.setters[base][setter.delegate_method]
                    holder = self._holder_from_writes(qualname, inner_setter, problems)
                    chain.append(inner_setter)
                    effective = compose(F.IDENTITY if setter.id_transform == F.DELEGATES else setter.id_transform, inner_setter.id_transform)
                else:
                    problems.append(f"super().{setter.delegate_method}() has no base-class definition in the tree")
                target = None
            elif setter.delegate_method:
                # a local holder (`holder = getattr(self, "model", self)`): find who defines the method
                target = self.holder_for_method(qualname, setter.delegate_method)
            if target is None and setter.delegate != "super()":
                problems.append(f"setter hands the ids to {setter.delegate}.{setter.delegate_method}(), whose class could not be resolved")
            elif target is None:
                pass
            else:
                delegates_to = target
                inner = self.resolve_capture(target, depth + 1, (setter.delegate_method,) if setter.delegate_method else None)
                if inner is None and setter.writes:
                    # `if hasattr(self.model, "<setter>"): delegate, else: write the attribute`
                    delegates_to = None
                    holder = self._holder_from_writes(qualname, setter, problems)
                elif inner is None:
                    problems.append(f"{setter.delegate} is a {target.rsplit('.', 1)[-1]}, which has no {setter.delegate_method}()")
                else:
                    chain.extend(inner.chain)
                    effective = compose(setter.id_transform if setter.id_transform != F.DELEGATES else F.IDENTITY, inner.effective_transform)
                    holder = inner.holder
                    problems.extend(inner.problems)
        else:
            holder = self._holder_from_writes(qualname, setter, problems)
            if not setter.writes:
                problems.append("the setter writes no capture attribute named by the profile (it may capture another way; `flowtrace probe capture` can tell)")

        default_layers = setter.default_layers
        default_location = setter.location if default_layers else None
        if default_layers is None and inner is not None:
            default_layers, default_location = inner.default_layers, inner.default_location
        if default_layers is None:
            for q in self.mro(qualname):
                getter = self.getters.get(q)
                if getter is not None:
                    default_layers, default_location = getter.expression, getter.location
                    break

        if inner is not None:
            site, point, note, evidence = inner.site, inner.point, inner.point_note, inner.point_evidence
            emb, last = inner.embedding_capturable, inner.last_layer_capturable
        else:
            site, point, note, evidence, emb, last = None, F.UNKNOWN, "no capture site found", (), None, None
            if holder is not None:
                attribute_hint = {w.rsplit(".", 1)[-1] for w in setter.writes}
                site = self.site_for(holder, attribute_hint)
                if site is None:
                    problems.append(f"{holder.rsplit('.', 1)[-1]} has no capture loop reading the ids")
                else:
                    point, note, evidence = site.point, site.note, site.evidence
                    emb, last = site.embedding_capturable, site.last_layer_capturable
                    if site.mechanism in (F.CALLBACK, F.PACKER) and site.point == F.UNKNOWN:
                        point, note, evidence = self.callback_point(holder, site)
                        emb = point == F.INPUT if point != F.UNKNOWN else None
                        last = point == F.OUTPUT if point != F.UNKNOWN else None
        return Capture(
            setter=setter,
            inherited=inherited,
            id_transform=setter.id_transform,
            transform_note=setter.transform_note,
            effective_transform=effective,
            delegates_to=delegates_to,
            default_layers=default_layers,
            default_location=default_location,
            holder=holder,
            site=site,
            point=point,
            point_note=note,
            point_evidence=evidence,
            embedding_capturable=emb,
            last_layer_capturable=last,
            chain=tuple(chain),
            problems=tuple(problems),
        )

    @cached_property
    def rows(self) -> tuple[ModelRow, ...]:
        registered: dict[str, list[str]] = {}
        generation: set[str] = set()
        groups = self.conv.generation_dicts
        for target, entries in self.registry.items():
            found = self.find_class(target)
            if found:
                registered.setdefault(found, []).extend(e.architecture for e in entries)
                if any(e.kind != "registry_dict" or not groups or e.group in groups for e in entries):
                    generation.add(found)
        out = []
        providers = self.conv.interfaces | self.conv.holders
        for qualname in sorted(self.classes):
            if self.classes[qualname].name in providers:
                continue  # the engine's own interface/mixin provides capture; it is not a model
            capture = self.resolve_capture(qualname)
            source = self._source(qualname, registered) if capture is None else None
            if capture is None and source is None and qualname not in registered:
                continue
            cls = self.classes[qualname]
            if capture is None:
                support = source.support if source is not None else NONE
            elif capture.problems or capture.site is None:
                support = BROKEN
            elif capture.delegates_to and capture.delegates_to != capture.holder or capture.setter.delegate:
                support = DELEGATED
            elif capture.inherited:
                support = INHERITED
            else:
                support = SUPPORTED
            out.append(
                ModelRow(
                    name=cls.name,
                    qualname=qualname,
                    location=cls.location,
                    registered=qualname in registered,
                    architectures=tuple(sorted(set(registered.get(qualname, ())))),
                    generation_target=qualname in generation,
                    support=support,
                    capture=capture,
                    source=source,
                )
            )
        return tuple(out)

    def _source(self, qualname: str, registered: dict[str, list[str]]):
        """The setter-less capture path of a registered class, or of a class that opts in
        through a profile-named base (see config_capture)."""
        from flowtrace.analysis.config_capture import opts_in, resolve_source

        if qualname not in registered and not opts_in(self, qualname):
            return None
        return resolve_source(self, qualname, tuple(sorted(set(registered.get(qualname, ())))))

    def row(self, name: str) -> ModelRow | None:
        """A row by qualified name, simple class name, or registered architecture."""
        rows = self.rows
        for r in rows:
            if r.qualname == name:
                return r
        # Several classes may share a name or an architecture (a diffusion or encoder copy in
        # another subpackage): prefer registered classes that can capture.
        def preference(r: ModelRow):
            return (not r.registered, r.capture is None, r.name != name, r.qualname)

        by_simple = sorted((r for r in rows if r.name == name), key=preference)
        by_arch = sorted((r for r in rows if name in r.architectures), key=preference)
        if by_simple and (not by_arch or preference(by_simple[0]) <= preference(by_arch[0])):
            return by_simple[0]
        return by_arch[0] if by_arch else None

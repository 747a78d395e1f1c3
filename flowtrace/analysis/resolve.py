"""Cross-file resolution: from per-file facts to one row per model class.

Per-file facts cannot say whether a registered class can capture: its setter may live on a
base class in another file, hand the ids to ``self.language_model``, or to a holder found
only through the attributes built in ``__init__``. This module links classes by qualified
name (falling back to a unique simple name), walks bases depth-first, follows delegation
and attribute construction, and decides the capture point of callback sites by looking up
how the layer's forward uses the callback (a :class:`flowtrace.model.facts.CallbackUse`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import cached_property

from flowtrace.index.sites import PointDecision, point_decision
from flowtrace.index.stream_facts import FOLDS_RESIDUAL
from flowtrace.model import facts as F
from flowtrace.analysis.attribute_flow import unread
from flowtrace.engines.profiles import Conventions
from flowtrace.analysis.return_path import return_link
from flowtrace.index.stream_facts import EARLY_RETURN
from flowtrace.model.links import NOT_BREAKING, CaptureChain, Problem, SlotsLink, StreamLink, compose_transforms
from flowtrace.analysis.capture import Capture
from flowtrace.analysis.chain import ConcatIndex, setter_chain, source_chain
from flowtrace.analysis.config_capture import SourceCapture, opts_in, resolve_source
from flowtrace.analysis.serving import serving_link

SUPPORTED, INHERITED, DELEGATED, CONDITIONAL, BROKEN, NONE = (
    F.Support.SUPPORTED, F.Support.INHERITED, F.Support.DELEGATED, F.Support.CONDITIONAL, F.Support.BROKEN, F.Support.NONE,
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


@dataclass
class _Resolution:
    """What resolving one class's chain has found so far (phases fill it in)."""

    qualname: str
    setter: F.SetterFact
    issues: list[Problem] = field(default_factory=list)
    chain: list[F.SetterFact] = field(default_factory=list)
    targets: list[str] = field(default_factory=list)
    effective: str = F.OTHER
    delegates_to: str | None = None
    holder: str | None = None
    holder_kind: F.HolderKind = F.HolderKind.DIRECT
    depends_on: str | None = None
    inner: Capture | None = None

    def problem(self, kind: F.ProblemKind, text: str, location: F.Location | None = None) -> None:
        self.issues.append(Problem(kind, text, location))


compose = compose_transforms  # the transform of ``inner(outer(ids))`` (defined with the links)


# Problems that describe how a chain behaves on some ids rather than a chain that cannot work.
_NOT_BREAKING = NOT_BREAKING


def _own_index_offset(label: str | None) -> int | None:
    """k when a layer labels its record with its own index plus k (``self.layer_idx`` -> 0,
    ``self.layer_idx + 1`` -> 1); None for anything else."""
    m = re.fullmatch(r"self\.\w+(?:\s*\+\s*(\d+))?", label or "")
    return None if m is None else int(m.group(1) or 0)


def _use_point(position: str) -> tuple[str, str]:
    """(point, why) from where a layer forward uses what it is handed, relative to its compute."""
    if position == "before":
        return F.INPUT, "before its first sub-module call: records the layer's input"
    if position == "after":
        return F.OUTPUT, "after its last sub-module call: records the layer's output"
    return F.UNKNOWN, "between sub-module calls; neither input nor output"


def stream_link(site: F.CaptureSiteFact, point: str, layers_fold: bool = False, siblings: tuple[F.CaptureSiteFact, ...] = ()) -> StreamLink:
    """Stream semantics of a site: what it records and whether its first index raises.
    ``layers_fold``: the loop's layers add the residual themselves and return the stream
    first, so recording that first value alone is the stream, not a delta. ``siblings``: the
    other capture branches of the same loop; when the site's own branch is not taken at the
    first index but a sibling's is and raises there, the first index raises at the sibling."""
    first = site if site.first_none else next((s for s in siblings if s.first_none and s.label_offset is not None), site)
    if site.mutated_later:
        kind = F.StreamKind.MUTATED_REFERENCE
    elif site.split_residual and site.captured_expression and not site.uses_residual and not layers_fold:
        kind = F.StreamKind.DELTA
    elif site.captured_expression:
        kind = F.StreamKind.RESIDUAL_STREAM
    else:
        kind = F.StreamKind.UNKNOWN  # recorded inside the layer (callback): not followed here
    raising, reason = None, None
    if first.first_none and first.label_offset is not None:
        raising = first.label_offset  # met at the first iteration of a loop that starts at 0
        where = f" (bound to None at {first.first_none_at})" if first.first_none_at else ""
        reason = (
            f"index {raising}: `{first.captured_expression}` is evaluated before the first layer runs, "
            f"while {first.first_none} is None{where}: TypeError"
        )
    return StreamLink(
        kind, site.captured_expression, raising, first.stored_at if raising is not None else None, reason,
        site.mutated_later, site.mutated_at, bool(site.mutated_later) and not site.mutated_rebound,
    )


def _nearest(candidates: list[str], near: str) -> str | None:
    """The one candidate sharing the longest dotted prefix with ``near`` (None on a tie)."""
    def shared(c: str) -> int:
        n = 0
        for a, b in zip(c.split("."), near.split(".")):
            if a != b:
                break
            n += 1
        return n

    ranked = sorted(((shared(c), c) for c in candidates), reverse=True)
    if not ranked or (len(ranked) > 1 and ranked[0][0] == ranked[1][0]):
        return None
    return ranked[0][1]


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
        self.helpers: dict[str, dict[str, F.HelperDefFact]] = {}
        self.output_uses: dict[str, list[F.OutputUseFact]] = {}
        self.return_shapes: dict[str, list[F.ReturnShapeFact]] = {}
        self.flag_defaults: dict[str, list[F.FlagDefaultFact]] = {}
        self.early_returns: dict[str, list[F.StreamFact]] = {}
        self.folding: set[str] = set()  # layer classes whose forward returns the stream with the residual added
        self.reexports: dict[str, dict[str, list[str]]] = {}  # package -> name -> what its __init__ binds it to
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
            for h in ff.helper_defs:
                self.helpers.setdefault(h.class_qualname, {})[h.method] = h
            for imp in ff.reexports:
                self.reexports.setdefault(ff.module, {}).setdefault(imp.local, []).append(imp.qualified)
            self._index_returns(ff)

    def _index_returns(self, ff: F.FileFacts) -> None:
        """Return-path facts by class (link 6, analysis/return_path.py)."""
        for u in ff.output_uses:
            self.output_uses.setdefault(u.class_qualname, []).append(u)
        for r in ff.return_shapes:
            self.return_shapes.setdefault(r.class_qualname, []).append(r)
        for d in ff.flag_defaults:
            self.flag_defaults.setdefault(d.class_qualname, []).append(d)
        for s in ff.stream_facts:
            if s.kind == EARLY_RETURN:
                self.early_returns.setdefault(s.class_qualname, []).append(s)
            self.folding.update(f.class_qualname for f in ff.stream_facts if f.kind == FOLDS_RESIDUAL)

    # -- class lookups -----------------------------------------------------------
    def find_class(self, name: str, near: str | None = None) -> str | None:
        """The class ``name`` means. ``near`` is the class whose code names it: when the name
        points at a package that re-exports one of several same-named variants (one per
        platform, picked by its ``__init__``), the variant beside ``near`` is the one built
        with it (each variant's wrapper and language model come from the same branch)."""
        if name in self.classes:
            return name
        if name.startswith("arch:"):  # a factory given an architecture name: ask the registry
            for target, entries in self.registry.items():
                if any(e.architecture == name[5:] for e in entries):
                    return self.find_class(target, near) if not target.startswith("arch:") else None
            return None
        simple = name.rsplit(".", 1)[-1]
        candidates = self.by_name.get(simple, [])
        if len(candidates) == 1:
            return candidates[0]
        # Prefer a candidate in the module the name points at (re-exports, relative imports).
        module = name.rpartition(".")[0]
        close = [c for c in candidates if module and c.startswith(module.rpartition(".")[0])]
        if len(close) == 1:
            return close[0]
        inside = [c for c in close if c.startswith(module + ".")]
        return _nearest(inside, near) if near else None

    def registered_classes(self, target: str) -> list[str]:
        """The classes a registry entry names: what the named package's ``__init__`` binds the
        name to (each platform's branch: an alias of another class, a class of another package
        of the engine), else the one it resolves to, else every same-named variant inside the
        package (an ``__init__`` not read)."""
        module, _, simple = target.rpartition(".")
        bound = self._reexported(module, simple)
        if bound:
            return bound
        found = self.find_class(target)
        if found:
            return [found]
        return sorted(c for c in self.by_name.get(simple, []) if module and c.startswith(module + "."))

    def _reexported(self, module: str, name: str, depth: int = 0) -> list[str]:
        """The classes ``module``'s ``__init__`` binds ``name`` to, through further packages."""
        out: list[str] = []
        for qualified in self.reexports.get(module, {}).get(name, []) if depth < 4 else ():
            inner_module, _, inner = qualified.rpartition(".")
            found = self._reexported(inner_module, inner, depth + 1) or ([q] if (q := self.find_class(qualified, near=module + ".")) else [])
            out.extend(c for c in found if c not in out)
        return sorted(out)

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
        """The class built as ``self.<attribute>`` for an instance of ``qualname``: the first
        assignment in the MRO, with what a more derived class changes about it (an overriding
        factory method, a class handed to ``super().__init__``)."""
        mro = self.mro(qualname)
        for n, q in enumerate(mro):
            cls = self.classes.get(q)
            if cls is None:
                continue
            for a in cls.assignments:
                if a.attribute == attribute:
                    found = self.find_class(self.overridden_callee(mro[:n], a) or a.callee, near=q)
                    if found:
                        return found
        return None

    def overridden_callee(self, derived: list[str], a: F.AttributeAssignment) -> str | None:
        """What a class more derived than the assignment's makes it build (most derived wins)."""
        if not a.via:
            return None
        kind, _, rest = a.via.partition(":")
        name, _, position = rest.partition("#")
        for q in derived:
            cls = self.classes.get(q)
            if cls is None:
                continue
            if kind == "method":
                hit = next((f.callee for f in cls.factories if f.attribute == name), None)
            elif kind == "attr":  # the subclass sets the class attribute the base builds from
                hit = next((v.callee for v in cls.class_values if v.attribute == name), None)
            else:
                hit = next((s.callee for s in cls.super_args if s.attribute in (name, f"#{position}")), None)
            if hit:
                return hit
        return None

    def layers_fold(self, holder: str | None) -> bool:
        """The layers a holder builds add the residual themselves (a folding layer it builds,
        else one in its module, as an engine keeps a model's layers beside it)."""
        if holder is None:
            return False
        if any(c in self.folding for c in self.constructed(holder)):
            return True
        module = holder.rpartition(".")[0]
        return any(c.rpartition(".")[0] == module for c in self.folding)

    def constructed(self, qualname: str) -> list[str]:
        out: list[str] = []
        for q in self.mro(qualname):
            cls = self.classes.get(q)
            if cls:
                for a in cls.assignments:
                    found = self.find_class(a.callee, near=q)
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
                for found in self.instance_attributes(q).values():
                    if defines(found):
                        return found
                    nxt.append(found)
            frontier = nxt
        return None

    def instance_attributes(self, qualname: str) -> dict[str, str]:
        """``self.<attribute>`` -> the class an instance of ``qualname`` really holds there, in
        MRO order. A more derived class's assignment shadows the base's (a wrapper whose own
        ``__init__`` builds its language model by another architecture name holds that one,
        never the base's), as :meth:`attribute_class` decides for one attribute."""
        out: dict[str, str] = {}
        for q in self.mro(qualname):
            cls = self.classes.get(q)
            for a in cls.assignments if cls else ():
                if a.attribute == "*" or a.attribute in out:
                    continue
                found = self.attribute_class(qualname, a.attribute)
                if found:
                    out[a.attribute] = found
        return out

    def site_for(self, holder: str, attribute_hint: set[str]) -> F.CaptureSiteFact | None:
        """The capture site the holder really runs: a base class's site is skipped when a class
        earlier in the order overrides that method (its forward replaces the capturing one)."""
        overridden: set[str] = set()
        for q in self.mro(holder):
            sites = [s for s in self.sites.get(q, []) if s.function.split(".")[-1] not in overridden and self.confirmed(holder, s)]
            cls = self.classes.get(q)
            if cls is not None:
                overridden.update(set(cls.methods) - set(cls.extends))  # `super().forward(...)` keeps the base's site
            ranked = sorted(sites, key=lambda s: (s.function.split(".")[-1] != "forward", s.attribute not in attribute_hint, s.location.line))
            if ranked:
                return ranked[0]
        return None

    def siblings(self, site: F.CaptureSiteFact) -> tuple[F.CaptureSiteFact, ...]:
        """The other capture sites of the same loop (same method and range, same point)."""
        return tuple(
            s for s in self.sites.get(site.class_qualname, [])
            if s is not site and s.function == site.function and s.loop_range == site.loop_range and s.point == site.point
        )

    def helper_def(self, holder: str, method: str) -> F.HelperDefFact | None:
        return next((self.helpers[q][method] for q in self.mro(holder) if method in self.helpers.get(q, {})), None)

    def confirmed(self, holder: str, site: F.CaptureSiteFact) -> bool:
        """A structurally found helper call is a site only if the holder (or a base or mixin)
        defines a method of helper shape under that name."""
        return site.helper_method is None or self.helper_def(holder, site.helper_method) is not None

    def layer_use(self, holder: str, param: str | None) -> tuple[F.CallbackUse | None, str]:
        """How the layer forward the holder runs uses a parameter it is handed: (the use, where
        it is, for the note) or (None, why it cannot be told)."""
        if not param:
            return None, "handed to the layer positionally; cannot follow it"
        uses = [u for u in self.callbacks.get(param, []) if u.function == "forward"]
        if not uses:
            return None, f"no layer forward takes a '{param}' parameter; cannot follow the callback"
        built = set(self.constructed(holder))
        preferred = [u for u in uses if u.class_qualname in built]
        module = holder.rpartition(".")[0]
        same_module = [u for u in uses if u.class_qualname.rpartition(".")[0] == module]
        chosen = preferred or same_module or (uses if len({u.position for u in uses}) == 1 else [])
        if not chosen:
            return None, f"several layer classes take '{param}' and use it differently; cannot tell which runs here"
        use = chosen[0]
        where = f"{use.class_qualname.rsplit('.', 1)[-1]}.forward"
        if not (preferred or same_module):
            where = f"every layer forward taking '{param}' ({len(uses)} classes, e.g. {where})"
        return use, where

    def callback_point(self, holder: str, site: F.CaptureSiteFact) -> tuple[str, str, tuple[F.Location, ...]]:
        """Decide input/output for a callback site by how the layer's forward uses the callback."""
        param = site.callback_parameter
        if not param:
            return F.UNKNOWN, site.note, ()
        use, where = self.layer_use(holder, param)
        if use is None:
            return F.UNKNOWN, where, ()
        via = f" via {use.handed_to}" if use.handed_to and use.handed_to != "called" else ""
        point, what = _use_point(use.position)
        return point, f"{where} uses {param}{via} {what}", (use.location,)

    def hook_point(self, holder: str, site: F.CaptureSiteFact) -> tuple[str, str, tuple[F.Location, ...]]:
        """A hook object handed to the layers: the point is where the layer's forward calls it,
        and the method it calls must record (``if <label> in self.<attr>: ...append(x)`` on the
        object's class), else the object is not a capture path and the point stays unknown."""
        use, where = self.layer_use(holder, site.callback_parameter)
        if use is None:
            return F.UNKNOWN, where, ()
        method = (use.handed_to or "").rpartition(".")[2]
        owner = (site.container_class or "?").rsplit(".", 1)[-1]
        recorder = self.helper_def(site.container_class, method) if site.container_class and method else None
        if recorder is None:
            return F.UNKNOWN, f"{where} calls {use.handed_to}, which {owner} does not define as a recording method", (use.location,)
        label = use.arguments[recorder.label_arg] if recorder.label_arg < len(use.arguments) else None
        offset = _own_index_offset(label)
        if offset is None:
            return F.UNKNOWN, f"{where} calls {use.handed_to} with label `{label}`, not the layer's own index", (use.location, recorder.location)
        point, what = _use_point(use.position)
        if point != F.UNKNOWN and offset:  # `self.idx + 1` after the layer: the next layer's input
            shift = (1 if point == F.OUTPUT else 0) - offset
            point = F.INPUT if shift == 0 else F.OUTPUT if shift == 1 else F.UNKNOWN
            what = f"{what}, labelled {label}"
        note = f"{where} calls {use.handed_to}({label}, ...) {what}; {owner}.{method} records `{recorder.recorded}` when its label is in self.{recorder.attribute}"
        return point, note, (use.location, recorder.location)

    def _holder_from_writes(self, qualname: str, setter: F.SetterFact, res: _Resolution) -> str | None:
        """The class whose attribute the setter writes: ``self.attr`` -> this class,
        ``self.model.attr`` -> the class built as ``self.model``."""
        for write in setter.writes:
            parts = write.split(".")
            if len(parts) == 2 and parts[0] == "self":
                res.holder_kind = F.HolderKind.SELF
                return qualname
            if len(parts) == 3 and parts[0] == "self":
                holder = self.attribute_class(qualname, parts[1])
                if holder is None:
                    res.problem(F.ProblemKind.HOLDER_UNRESOLVED, f"cannot resolve the class of self.{parts[1]} written by the setter", setter.location)
                return holder
        return None

    # -- the capture path ----------------------------------------------------------
    def resolve_capture(self, qualname: str, depth: int = 0, names: tuple[str, ...] | None = None) -> Capture | None:
        """The chain a class runs: its setter, delegation, holder and capture site."""
        setter = self.find_setter(qualname, names)
        if setter is None or depth > 4:
            return None
        res = _Resolution(qualname, setter, chain=[setter], targets=[qualname], effective=setter.id_transform)
        if setter.delegate:
            self._follow_delegate(res, depth)
        else:
            res.holder = self._holder_from_writes(qualname, setter, res)
            if not setter.writes:
                res.problem(
                    F.ProblemKind.SETTER_WRITES_NOTHING,
                    "the setter writes no capture attribute named by the profile (it may capture another way; `flowtrace probe capture` can tell)",
                    setter.location,
                )
        return self._finish(res)

    def _delegate_target(self, res: _Resolution) -> str | None:
        """The class a delegating setter hands the ids to (None for super() and unresolved)."""
        setter = res.setter
        delegate = setter.delegate or ""
        if delegate.startswith("self.") and delegate.count(".") == 1:
            return self.attribute_class(res.qualname, delegate[5:])
        if delegate == "self":
            return res.qualname
        if delegate == "super()":
            return None
        if setter.delegate_method:
            # a local holder (`holder = getattr(self, "model", self)`): find who defines the method
            return self.holder_for_method(res.qualname, setter.delegate_method)
        return None

    def _follow_super(self, res: _Resolution) -> None:
        """``super().<setter>(ids)``: the base class's version, still acting on this object."""
        setter = res.setter
        method = setter.delegate_method or ""
        base = next((q for q in self.mro(setter.class_qualname)[1:] if method in self.setters.get(q, {})), None)
        if base is None:
            res.problem(F.ProblemKind.SUPER_UNRESOLVED, f"super().{setter.delegate_method}() has no base-class definition in the tree", setter.location)
            return
        inner_setter = self.setters[base][method]
        res.holder = self._holder_from_writes(res.qualname, inner_setter, res)
        res.chain.append(inner_setter)
        res.targets.append(res.qualname)
        res.effective = compose(F.IDENTITY if setter.id_transform == F.DELEGATES else setter.id_transform, inner_setter.id_transform)

    def dynamic_attribute(self, qualname: str, setter: F.SetterFact) -> tuple[str, F.AttributeAssignment, str] | None:
        """(config key, assignment) when the object the setter hands ids to is built at run
        time from a sub-config (``self.language_model = init_model(hf_config=config.text_config)``).
        The attribute the setter names wins; else the class's only dynamic attribute."""
        dynamic = [(q, a) for q in self.mro(qualname) for a in (self.classes[q].assignments if q in self.classes else ()) if a.callee.startswith("dynamic:")]
        if not dynamic:
            return None
        named = [(q, a) for q, a in dynamic if f".{a.attribute}" in (setter.delegate or "") or f"self.{a.attribute}" in setter.source]
        chosen = named or (dynamic if len({a.attribute for _, a in dynamic}) == 1 else [])
        if not chosen:
            return None
        q, a = chosen[0]
        return f"{a.callee[len('dynamic:'):]}.architectures", a, q

    def _held_text(self, qualname: str, setter: F.SetterFact) -> str | None:
        """Why a local holder (``holder = getattr(owner, "model", owner)``) receives no ids:
        the objects the instance holds (its own construction, not a base's it overrides),
        none of which defines the method; None when the class holds nothing known."""
        held = self.instance_attributes(qualname)
        if not setter.delegate_method or not held or (setter.delegate or "").startswith("self"):
            return None
        inner = [f"self.{a}.{b} = {c.rsplit('.', 1)[-1]}" for a, q in held.items() for b, c in self.instance_attributes(q).items()]
        reached = ", ".join([f"self.{a} = {q.rsplit('.', 1)[-1]}" for a, q in held.items()] + inner)
        return f"setter hands the ids to {setter.delegate}.{setter.delegate_method}(), which no object this class holds defines ({reached})"

    def unresolved_in_tree(self, qualname: str) -> list[str]:
        """Names a class of this tree, written as a base or built as an attribute, that could
        not be resolved, for ``qualname`` and the objects it holds (two levels, as
        :meth:`holder_for_method` searches). Saying that no held object defines a method
        (the engine raises) needs none: an unresolved base may well define it (a tree
        scanned under another package name than its absolute imports use)."""
        out: list[str] = []
        frontier, seen = [qualname], set()
        for _ in range(3):
            nxt: list[str] = []
            for q in frontier:
                if q in seen:
                    continue
                seen.add(q)
                out.extend(n for n in self._unresolved_names(q) if n not in out)
                nxt.extend(self.instance_attributes(q).values())
            frontier = nxt
        return out

    def _unresolved_names(self, qualname: str) -> list[str]:
        """In ``qualname``'s MRO: bases and built classes whose simple name the tree defines
        (so they are no library's) that :meth:`find_class` cannot pin to one class."""
        out: list[str] = []
        for q in self.mro(qualname):
            cls = self.classes.get(q)
            if cls is None:
                continue
            built = [a.callee for a in cls.assignments if a.attribute != "*" and not a.callee.startswith(("dynamic:", "arch:"))]
            out.extend(n for n in cls.bases if self._named_here(n) and self.find_class(n) is None)  # as mro() resolves
            out.extend(n for n in built if self._named_here(n) and self.find_class(n, near=q) is None)  # as attribute_class()
        return out

    def _named_here(self, name: str) -> bool:
        """``name`` means a class of this tree, not a library's (``torch.nn.LayerNorm`` is
        not the tree's ``LayerNorm``): its simple name is defined here and its module is one
        of the tree's, under the tree's package or another one (a copy whose absolute
        imports still name the original package: ``pkg.models.x`` for ``copy.models.x``)."""
        module, _, simple = name.rpartition(".")
        if simple not in self.by_name:
            return False
        if not module:
            return True
        head, _, rest = module.partition(".")
        modules = {q.rpartition(".")[0] for q in self.by_name[simple]}
        return any(m.partition(".")[0] == head for m in modules) or any(m == rest or m.endswith("." + rest) for m in modules if rest)

    def _follow_delegate(self, res: _Resolution, depth: int) -> None:
        setter = res.setter
        if setter.delegate == "super()" and setter.delegate_method:
            self._follow_super(res)
            return
        target = self._delegate_target(res)
        dynamic = self.dynamic_attribute(res.qualname, setter) if target is None else None
        if dynamic is not None:
            key, assignment, owner = dynamic
            res.depends_on, res.holder_kind = key, F.HolderKind.DYNAMIC
            cls = self.classes.get(owner)
            where = F.Location(cls.location.file, assignment.line) if cls else setter.location
            res.problem(F.ProblemKind.DEPENDS_ON_CONFIG, f"self.{assignment.attribute} is built from the target config at run time: the class is {key}", where)
            return
        if target is None:
            if setter.delegate != "super()":
                lacking = self._held_text(res.qualname, setter)
                doubt = self.unresolved_in_tree(res.qualname) if lacking is not None else []
                if doubt:  # an object it holds may inherit the method from a class not resolved
                    res.problem(
                        F.ProblemKind.DELEGATE_UNRESOLVED,
                        f"setter hands the ids to {setter.delegate}.{setter.delegate_method}(); no object this class holds is known to define it, "
                        f"but {', '.join(doubt)} (a class this tree defines) could not be resolved, so one may inherit it",
                        setter.location,
                    )
                elif lacking is not None:  # every object it holds is known, and none defines the method
                    res.problem(F.ProblemKind.DELEGATE_LACKS_SETTER, lacking, setter.location)
                else:
                    res.problem(F.ProblemKind.DELEGATE_UNRESOLVED, f"setter hands the ids to {setter.delegate}.{setter.delegate_method}(), whose class could not be resolved", setter.location)
            return
        res.delegates_to = target
        inner = self.resolve_capture(target, depth + 1, (setter.delegate_method,) if setter.delegate_method else None)
        if inner is None and setter.writes:
            # `if hasattr(self.model, "<setter>"): delegate, else: write the attribute`
            res.delegates_to = None
            res.holder = self._holder_from_writes(res.qualname, setter, res)
        elif inner is None:
            res.problem(
                F.ProblemKind.DELEGATE_LACKS_SETTER,
                f"{setter.delegate} is a {target.rsplit('.', 1)[-1]}, which has no {setter.delegate_method}()",
                setter.location,
            )
        else:
            res.inner = inner
            res.chain.extend(inner.chain)
            res.targets.extend(inner.chain_targets or (target,) * len(inner.chain))
            res.effective = compose(setter.id_transform if setter.id_transform != F.DELEGATES else F.IDENTITY, inner.effective_transform)
            res.holder, res.holder_kind, res.depends_on = inner.holder, inner.holder_kind, inner.depends_on
            res.issues.extend(inner.issues)

    def _defaults(self, res: _Resolution) -> tuple[str | None, F.Location | None]:
        """The default-ids expression: the setter's own, an inner setter's, or a getter's."""
        if res.setter.default_layers is not None:
            return res.setter.default_layers, res.setter.location
        if res.inner is not None and res.inner.default_layers is not None:
            return res.inner.default_layers, res.inner.default_location
        for q in self.mro(res.qualname):
            getter = self.getters.get(q)
            if getter is not None:
                return getter.expression, getter.location
        return None, None

    def _site_of(self, res: _Resolution) -> tuple:
        """(site, point, note, evidence, embedding, last layer) from the holder's loop."""
        if res.inner is not None:
            i = res.inner
            return i.site, i.point, i.point_note, i.point_evidence, i.embedding_capturable, i.last_layer_capturable
        if res.holder is None:
            return None, F.UNKNOWN, "no capture site found", (), None, None
        attribute_hint = {w.rsplit(".", 1)[-1] for w in res.setter.writes}
        site = self.site_for(res.holder, attribute_hint)
        if site is None:
            res.problem(F.ProblemKind.NO_CAPTURE_SITE, f"{res.holder.rsplit('.', 1)[-1]} has no capture loop reading the ids", res.setter.location)
            return None, F.UNKNOWN, "no capture site found", (), None, None
        point: str = site.point
        note, evidence = site.note, site.evidence
        emb, last = site.embedding_capturable, site.last_layer_capturable
        decision = point_decision(site)  # asked of the shape that found the site
        if decision != PointDecision.IN_LOOP and site.point == F.UNKNOWN:
            decide = self.hook_point if decision == PointDecision.HOOK_CALL else self.callback_point
            point, note, evidence = decide(res.holder, site)
            emb = point == F.INPUT if point != F.UNKNOWN else None
            last = point == F.OUTPUT if point != F.UNKNOWN else None
        if site.post_loop_at is not None:
            last = True
        return site, point, note, evidence, emb, last

    def _finish(self, res: _Resolution) -> Capture:
        setter = res.setter
        default_layers, default_location = self._defaults(res)
        site, point, note, evidence, emb, last = self._site_of(res)
        stream = stream_link(site, point, self.layers_fold(res.holder), self.siblings(site)) if site is not None else None
        if stream is not None and stream.raising_index is not None and stream.raising_index + (0 if point == F.INPUT else 1) == 0:
            emb = False  # recording the embedding raises
            res.problem(F.ProblemKind.INDEX0_RAISES, stream.reason or "index 0 raises", stream.raises_at)
        mismatch = None
        if site is not None:
            forward = tuple(s for s in self.sites.get(site.class_qualname, []) if s.function == site.function)
            mismatch = unread(tuple(res.chain), forward, site)
            if mismatch is not None:
                res.problem(F.ProblemKind.SETTER_WRITES_UNREAD, mismatch.words(), mismatch.setter_at)
        slots = self.slots_link(site) if site is not None else None
        returns = return_link(self, res.qualname, res.chain, res.targets, res.holder, site)
        if returns is not None and returns.kind != F.ReturnKind.RETURNED and returns.decided:
            res.problem(F.ProblemKind.RETURN_DROPPED, returns.reason or str(returns.kind), returns.location)
        return Capture(
            setter=setter,
            inherited=setter.class_qualname != res.qualname,
            id_transform=setter.id_transform,
            transform_note=setter.transform_note,
            effective_transform=res.effective,
            delegates_to=res.delegates_to,
            default_layers=default_layers,
            default_location=default_location,
            holder=res.holder,
            site=site,
            point=point,
            point_note=note,
            point_evidence=evidence,
            embedding_capturable=emb,
            last_layer_capturable=last,
            chain=tuple(res.chain),
            problems=tuple(p.text for p in res.issues if p.kind not in _NOT_BREAKING),
            issues=tuple(dict.fromkeys(res.issues)),
            chain_targets=tuple(res.targets),
            holder_kind=res.holder_kind,
            depends_on=res.depends_on,
            stream=stream,
            slots=slots,
            concat_order=F.ConcatOrder(site.concat_order) if site is not None else F.ConcatOrder.LOOP,
            returns=returns,
            unread=mismatch,
        )

    def slots_link(self, site: F.CaptureSiteFact) -> SlotsLink | None:
        """A collector with one slot per capture index, and the check that raises when a
        different number of states arrives (read from the collector's own class)."""
        if not site.container_sized_by or not site.container_class:
            return None
        found = self.find_class(site.container_class)
        check = None
        for q in self.mro(found) if found else ():
            cls = self.classes.get(q)
            checks = [c for c in cls.raise_checks if c.method == site.finalize_method] if cls else []
            if checks:
                check = checks[0]
                break
        return SlotsLink(
            collector=found or site.container_class,
            sized_by=site.container_sized_by,
            check=check.condition if check else None,
            check_at=check.location if check else None,
            finalize_at=site.finalize_at,
            empty_return_at=site.empty_return_at,
        )

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
        return replace(chain, serving=serving_link(self, chain))

    @cached_property
    def rows(self) -> tuple[ModelRow, ...]:
        registered: dict[str, list[str]] = {}
        generation: set[str] = set()
        groups = self.conv.generation_dicts
        for target, entries in self.registry.items():
            for found in self.registered_classes(target):
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
            chain = self.chain_of(qualname, capture, source)
            if chain is not None and self.conv.method is not None and not self.conv.method.default:
                chain = replace(chain, method=self.conv.method.name)  # a chain names a method other than the default
            out.append(
                ModelRow(
                    name=cls.name,
                    qualname=qualname,
                    location=cls.location,
                    registered=qualname in registered,
                    architectures=tuple(sorted(set(registered.get(qualname, ())))),
                    generation_target=qualname in generation,
                    support=self.support_of(qualname, chain),
                    capture=capture,
                    chain=chain,
                )
            )
        return tuple(out)

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
        if self.setters[entry.owner][entry.method].delegate:
            return DELEGATED
        return INHERITED if entry.owner != qualname else SUPPORTED

    def _source(self, qualname: str, registered: dict[str, list[str]]) -> SourceCapture | None:
        """The setter-less capture path of a registered class, or of a class that opts in
        through a profile-named base (see config_capture)."""
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

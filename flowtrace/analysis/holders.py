"""Construction and holders: which objects a class builds, and where their capture runs.

A setter writes ``self.model.layers_to_capture``, or hands the ids to an object it holds;
the class really built as that attribute (an overriding factory, a class handed to
``super().__init__``), the capture site its forward runs, and the point a callback or hook
records are all read off construction facts here, on top of :class:`ClassLookup`.
"""

from __future__ import annotations

import re

from flowtrace.analysis.class_lookup import ClassLookup
from flowtrace.model import facts as F
from flowtrace.model.links import SlotsLink


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


class Holders:
    """What instances build and hold, read off the class lookup it is given (and nothing
    above it: which setter hands ids where is the capture assembly's business)."""

    def __init__(self, lookup: ClassLookup) -> None:
        self.lookup = lookup

    def attribute_class(self, qualname: str, attribute: str) -> str | None:
        """The class built as ``self.<attribute>`` for an instance of ``qualname``: the first
        assignment in the MRO, with what a more derived class changes about it (an overriding
        factory method, a class handed to ``super().__init__``)."""
        mro = self.lookup.mro(qualname)
        for n, q in enumerate(mro):
            cls = self.lookup.classes.get(q)
            if cls is None:
                continue
            for a in cls.assignments:
                if a.attribute == attribute:
                    found = self.lookup.find_class(self.overridden_callee(mro[:n], a) or a.callee, near=q)
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
            cls = self.lookup.classes.get(q)
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
        if any(c in self.lookup.folding for c in self.constructed(holder)):
            return True
        module = holder.rpartition(".")[0]
        return any(c.rpartition(".")[0] == module for c in self.lookup.folding)

    def constructed(self, qualname: str) -> list[str]:
        out: list[str] = []
        for q in self.lookup.mro(qualname):
            cls = self.lookup.classes.get(q)
            if cls:
                for a in cls.assignments:
                    found = self.lookup.find_class(a.callee, near=q)
                    if found and found not in out:
                        out.append(found)
        return out

    def holder_for_method(self, qualname: str, method: str) -> str | None:
        """The object a setter hands ids to through a local (``holder = getattr(...)``): the
        class itself or an attribute class (two levels deep) that defines ``method``."""
        def defines(q: str) -> bool:
            return any(method in self.lookup.setters.get(c, {}) for c in self.lookup.mro(q))

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
        for q in self.lookup.mro(qualname):
            cls = self.lookup.classes.get(q)
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
        for q in self.lookup.mro(holder):
            sites = [
                s
                for s in self.lookup.sites.get(q, [])
                if s.function.split(".")[-1] not in overridden and self.confirmed(holder, s)
            ]
            cls = self.lookup.classes.get(q)
            if cls is not None:
                overridden.update(set(cls.methods) - set(cls.extends))  # `super().forward(...)` keeps the base's site
            ranked = sorted(
                sites,
                key=lambda s: (
                    s.function.split(".")[-1] != "forward",
                    s.attribute not in attribute_hint,
                    s.location.line,
                ),
            )
            if ranked:
                return ranked[0]
        return None

    def siblings(self, site: F.CaptureSiteFact) -> tuple[F.CaptureSiteFact, ...]:
        """The other capture sites of the same loop (same method and range, same point)."""
        return tuple(
            s
            for s in self.lookup.sites.get(site.class_qualname, [])
            if s is not site
            and s.function == site.function
            and s.loop_range == site.loop_range
            and s.point == site.point
        )

    def helper_def(self, holder: str, method: str) -> F.HelperDefFact | None:
        helpers = self.lookup.helpers
        return next((helpers[q][method] for q in self.lookup.mro(holder) if method in helpers.get(q, {})), None)

    def confirmed(self, holder: str, site: F.CaptureSiteFact) -> bool:
        """A structurally found helper call is a site only if the holder (or a base or mixin)
        defines a method of helper shape under that name."""
        return site.helper_method is None or self.helper_def(holder, site.helper_method) is not None

    def layer_use(self, holder: str, param: str | None) -> tuple[F.CallbackUse | None, str]:
        """How the layer forward the holder runs uses a parameter it is handed: (the use, where
        it is, for the note) or (None, why it cannot be told)."""
        if not param:
            return None, "handed to the layer positionally; cannot follow it"
        uses = [u for u in self.lookup.callbacks.get(param, []) if u.function == "forward"]
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
            return (
                F.UNKNOWN,
                f"{where} calls {use.handed_to}, which {owner} does not define as a recording method",
                (use.location,),
            )
        label = use.arguments[recorder.label_arg] if recorder.label_arg < len(use.arguments) else None
        offset = _own_index_offset(label)
        if offset is None:
            return (
                F.UNKNOWN,
                f"{where} calls {use.handed_to} with label `{label}`, not the layer's own index",
                (use.location, recorder.location),
            )
        point, what = _use_point(use.position)
        if point != F.UNKNOWN and offset:  # `self.idx + 1` after the layer: the next layer's input
            shift = (1 if point == F.OUTPUT else 0) - offset
            point = F.INPUT if shift == 0 else F.OUTPUT if shift == 1 else F.UNKNOWN
            what = f"{what}, labelled {label}"
        note = (
            f"{where} calls {use.handed_to}({label}, ...) {what}; {owner}.{method} records `{recorder.recorded}` when"
            f" its label is in self.{recorder.attribute}"
        )
        return point, note, (use.location, recorder.location)

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
        for q in self.lookup.mro(qualname):
            cls = self.lookup.classes.get(q)
            if cls is None:
                continue
            built = [
                a.callee
                for a in cls.assignments
                if a.attribute != "*" and not a.callee.startswith(("dynamic:", "arch:"))
            ]
            named_here, find_class = self.lookup.named_here, self.lookup.find_class
            out.extend(n for n in cls.bases if named_here(n) and find_class(n) is None)  # as mro() resolves
            # as attribute_class()
            out.extend(n for n in built if named_here(n) and find_class(n, near=q) is None)
        return out

    def slots_link(self, site: F.CaptureSiteFact) -> SlotsLink | None:
        """A collector with one slot per capture index, and the check that raises when a
        different number of states arrives (read from the collector's own class)."""
        if not site.container_sized_by or not site.container_class:
            return None
        found = self.lookup.find_class(site.container_class)
        check = None
        for q in self.lookup.mro(found) if found else ():
            cls = self.lookup.classes.get(q)
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

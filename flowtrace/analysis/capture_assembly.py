"""Capture chain assembly: from a class's setter to its capture, one link at a time.

A class's setter may live on a base class, delegate to ``super()``, to an object it holds
or to one built at run time from the target config; :class:`CaptureAssembly` follows that
delegation through :class:`Holders`, finds the holder's capture site and point, and
assembles the :class:`Capture` the row's typed chain is built from.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from flowtrace.analysis.attribute_flow import unread
from flowtrace.analysis.capture import Capture
from flowtrace.analysis.class_lookup import ClassLookup
from flowtrace.analysis.holders import Holders
from flowtrace.analysis.return_path import return_link
from flowtrace.index.sites import PointDecision, point_decision
from flowtrace.model import facts as F
from flowtrace.model.links import NOT_BREAKING, Problem, StreamLink, compose_transforms


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
# (site, point, note, evidence, embedding capturable, last layer capturable): the Capture fields a holder's loop decides
_SiteAnswer = tuple[F.CaptureSiteFact | None, str, str, tuple[F.Location, ...], bool | None, bool | None]


# Problems that describe how a chain behaves on some ids rather than a chain that cannot work.
_NOT_BREAKING = NOT_BREAKING


def stream_link(
    site: F.CaptureSiteFact, point: str, layers_fold: bool = False, siblings: tuple[F.CaptureSiteFact, ...] = ()
) -> StreamLink:
    """Stream semantics of a site: what it records and whether its first index raises.
    ``layers_fold``: the loop's layers add the residual themselves and return the stream
    first, so recording that first value alone is the stream, not a delta. ``siblings``: the
    other capture branches of the same loop; when the site's own branch is not taken at the
    first index but a sibling's is and raises there, the first index raises at the sibling."""
    first = (
        site if site.first_none else next((s for s in siblings if s.first_none and s.label_offset is not None), site)
    )
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


class CaptureAssembly:
    """The capture path of each class, assembled from the class lookup (setters, getters,
    sites by class) and the holders (what each instance builds); neither reads it back."""

    def __init__(self, lookup: ClassLookup, holders: Holders) -> None:
        self.lookup = lookup
        self.holders = holders

    def _holder_from_writes(self, qualname: str, setter: F.SetterFact, res: _Resolution) -> str | None:
        """The class whose attribute the setter writes: ``self.attr`` -> this class,
        ``self.model.attr`` -> the class built as ``self.model``."""
        for write in setter.writes:
            parts = write.split(".")
            if len(parts) == 2 and parts[0] == "self":
                res.holder_kind = F.HolderKind.SELF
                return qualname
            if len(parts) == 3 and parts[0] == "self":
                holder = self.holders.attribute_class(qualname, parts[1])
                if holder is None:
                    res.problem(
                        F.ProblemKind.HOLDER_UNRESOLVED,
                        f"cannot resolve the class of self.{parts[1]} written by the setter",
                        setter.location,
                    )
                return holder
        return None

    def resolve_capture(self, qualname: str, depth: int = 0, names: tuple[str, ...] | None = None) -> Capture | None:
        """The chain a class runs: its setter, delegation, holder and capture site."""
        setter = self.lookup.find_setter(qualname, names)
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
                    "the setter writes no capture attribute named by the profile (it may capture another way;"
                    " `flowtrace probe capture` can tell)",
                    setter.location,
                )
        return self._finish(res)

    def _delegate_target(self, res: _Resolution) -> str | None:
        """The class a delegating setter hands the ids to (None for super() and unresolved)."""
        setter = res.setter
        delegate = setter.delegate or ""
        if delegate.startswith("self.") and delegate.count(".") == 1:
            return self.holders.attribute_class(res.qualname, delegate[5:])
        if delegate == "self":
            return res.qualname
        if delegate == "super()":
            return None
        if setter.delegate_method:
            # a local holder (`holder = getattr(self, "model", self)`): find who defines the method
            return self.holders.holder_for_method(res.qualname, setter.delegate_method)
        return None

    def _follow_super(self, res: _Resolution) -> None:
        """``super().<setter>(ids)``: the base class's version, still acting on this object."""
        setter = res.setter
        method = setter.delegate_method or ""
        lookup = self.lookup
        base = next((q for q in lookup.mro(setter.class_qualname)[1:] if method in lookup.setters.get(q, {})), None)
        if base is None:
            res.problem(
                F.ProblemKind.SUPER_UNRESOLVED,
                f"super().{setter.delegate_method}() has no base-class definition in the tree",
                setter.location,
            )
            return
        inner_setter = self.lookup.setters[base][method]
        res.holder = self._holder_from_writes(res.qualname, inner_setter, res)
        res.chain.append(inner_setter)
        res.targets.append(res.qualname)
        res.effective = compose(
            F.IDENTITY if setter.id_transform == F.DELEGATES else setter.id_transform, inner_setter.id_transform
        )

    def dynamic_attribute(self, qualname: str, setter: F.SetterFact) -> tuple[str, F.AttributeAssignment, str] | None:
        """(config key, assignment) when the object the setter hands ids to is built at run
        time from a sub-config (``self.language_model = init_model(hf_config=config.text_config)``).
        The attribute the setter names wins; else the class's only dynamic attribute."""
        dynamic = [
            (q, a)
            for q in self.lookup.mro(qualname)
            for a in (self.lookup.classes[q].assignments if q in self.lookup.classes else ())
            if a.callee.startswith("dynamic:")
        ]
        if not dynamic:
            return None
        named = [
            (q, a)
            for q, a in dynamic
            if f".{a.attribute}" in (setter.delegate or "") or f"self.{a.attribute}" in setter.source
        ]
        chosen = named or (dynamic if len({a.attribute for _, a in dynamic}) == 1 else [])
        if not chosen:
            return None
        q, a = chosen[0]
        return f"{a.callee[len('dynamic:'):]}.architectures", a, q

    def _held_text(self, qualname: str, setter: F.SetterFact) -> str | None:
        """Why a local holder (``holder = getattr(owner, "model", owner)``) receives no ids:
        the objects the instance holds (its own construction, not a base's it overrides),
        none of which defines the method; None when the class holds nothing known."""
        held = self.holders.instance_attributes(qualname)
        if not setter.delegate_method or not held or (setter.delegate or "").startswith("self"):
            return None
        inner = [
            f"self.{a}.{b} = {c.rsplit('.', 1)[-1]}"
            for a, q in held.items()
            for b, c in self.holders.instance_attributes(q).items()
        ]
        reached = ", ".join([f"self.{a} = {q.rsplit('.', 1)[-1]}" for a, q in held.items()] + inner)
        return (
            f"setter hands the ids to {setter.delegate}.{setter.delegate_method}(), which no object this class holds"
            f" defines ({reached})"
        )

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
            cls = self.lookup.classes.get(owner)
            where = F.Location(cls.location.file, assignment.line) if cls else setter.location
            res.problem(
                F.ProblemKind.DEPENDS_ON_CONFIG,
                f"self.{assignment.attribute} is built from the target config at run time: the class is {key}",
                where,
            )
            return
        if target is None:
            if setter.delegate != "super()":
                lacking = self._held_text(res.qualname, setter)
                doubt = self.holders.unresolved_in_tree(res.qualname) if lacking is not None else []
                if doubt:  # an object it holds may inherit the method from a class not resolved
                    res.problem(
                        F.ProblemKind.DELEGATE_UNRESOLVED,
                        f"setter hands the ids to {setter.delegate}.{setter.delegate_method}(); no object this class"
                        f" holds is known to define it, but {', '.join(doubt)} (a class this tree defines) could not be"
                        " resolved, so one may inherit it",
                        setter.location,
                    )
                elif lacking is not None:  # every object it holds is known, and none defines the method
                    res.problem(F.ProblemKind.DELEGATE_LACKS_SETTER, lacking, setter.location)
                else:
                    res.problem(
                        F.ProblemKind.DELEGATE_UNRESOLVED,
                        f"setter hands the ids to {setter.delegate}.{setter.delegate_method}(), whose class could not"
                        " be resolved",
                        setter.location,
                    )
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
            res.effective = compose(
                setter.id_transform if setter.id_transform != F.DELEGATES else F.IDENTITY, inner.effective_transform
            )
            res.holder, res.holder_kind, res.depends_on = inner.holder, inner.holder_kind, inner.depends_on
            res.issues.extend(inner.issues)

    def _defaults(self, res: _Resolution) -> tuple[str | None, F.Location | None]:
        """The default-ids expression: the setter's own, an inner setter's, or a getter's."""
        if res.setter.default_layers is not None:
            return res.setter.default_layers, res.setter.location
        if res.inner is not None and res.inner.default_layers is not None:
            return res.inner.default_layers, res.inner.default_location
        for q in self.lookup.mro(res.qualname):
            getter = self.lookup.getters.get(q)
            if getter is not None:
                return getter.expression, getter.location
        return None, None

    def _site_of(self, res: _Resolution) -> _SiteAnswer:
        """(site, point, note, evidence, embedding, last layer) from the holder's loop."""
        if res.inner is not None:
            i = res.inner
            return i.site, i.point, i.point_note, i.point_evidence, i.embedding_capturable, i.last_layer_capturable
        if res.holder is None:
            return None, F.UNKNOWN, "no capture site found", (), None, None
        attribute_hint = {w.rsplit(".", 1)[-1] for w in res.setter.writes}
        site = self.holders.site_for(res.holder, attribute_hint)
        if site is None:
            res.problem(
                F.ProblemKind.NO_CAPTURE_SITE,
                f"{res.holder.rsplit('.', 1)[-1]} has no capture loop reading the ids",
                res.setter.location,
            )
            return None, F.UNKNOWN, "no capture site found", (), None, None
        point: str = site.point
        note, evidence = site.note, site.evidence
        emb, last = site.embedding_capturable, site.last_layer_capturable
        decision = point_decision(site)  # asked of the shape that found the site
        if decision != PointDecision.IN_LOOP and site.point == F.UNKNOWN:
            decide = self.holders.hook_point if decision == PointDecision.HOOK_CALL else self.holders.callback_point
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
        holders = self.holders
        stream = (
            None if site is None else stream_link(site, point, holders.layers_fold(res.holder), holders.siblings(site))
        )
        if (
            stream is not None
            and stream.raising_index is not None
            and stream.raising_index + (0 if point == F.INPUT else 1) == 0
        ):
            emb = False  # recording the embedding raises
            res.problem(F.ProblemKind.INDEX0_RAISES, stream.reason or "index 0 raises", stream.raises_at)
        mismatch = None
        if site is not None:
            forward = tuple(s for s in self.lookup.sites.get(site.class_qualname, []) if s.function == site.function)
            mismatch = unread(tuple(res.chain), forward, site)
            if mismatch is not None:
                res.problem(F.ProblemKind.SETTER_WRITES_UNREAD, mismatch.words(), mismatch.setter_at)
        slots = self.holders.slots_link(site) if site is not None else None
        returns = return_link(self.holders, res.qualname, res.chain, res.targets, res.holder, site)
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

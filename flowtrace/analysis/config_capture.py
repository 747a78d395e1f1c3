"""Capture paths without a setter: ids from a config attribute, a build context or the serving config.

The setter-centred resolution (``capture_assembly.py``) finds nothing for engines whose model never
receives the draft's ids. This module links, for one model class, the *id source* (a config
attribute its inner model reads in ``__init__``, a build-context field, or a metadata hook's
serving-config ids), the *writer* (the config builder selected for the class's architecture,
its speculative-method gate, the layout it writes), the *holder* and the *capture site*, and
decides the outcome: the engine captures its own layout (the draft's ids are ``ignored``),
captures nothing (the source is filled only for another method), or refuses the method.
A :class:`SourceCapture` is what resolution hands to :mod:`flowtrace.analysis.chain`, which makes
it the row's typed links; nothing else reads it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from flowtrace.model import facts as F

if TYPE_CHECKING:
    from flowtrace.analysis.class_lookup import ClassLookup
    from flowtrace.analysis.holders import Holders
    from flowtrace.analysis.source_index import SourceIndex

IGNORED = F.Transform.IGNORED  # the engine's own layout, whatever the draft's ids say
SERVING = F.SourceKind.SERVING_CONFIG  # ids from the engine's serving config, as given (not the draft's)
CAPTURES, CAPTURES_NOTHING, REFUSES = F.Outcome.CAPTURES, F.Outcome.CAPTURES_NOTHING, F.Outcome.REFUSES
HOOK = F.IdSourceKind.HOOK


SiteFact = F.CaptureSiteFact | F.DictCaptureFact | F.HookCallFact  # what records the states on a setter-less path


@dataclass(frozen=True, slots=True)
class SourceCapture:
    kind: F.IdSourceKind  # config | context | hook
    holder: str  # class holding the ids (inner model) or calling the hook (decoder layer)
    key: str  # config attribute, context field, or serving key
    source: F.IdSourceFact | None
    transform: F.Transform | F.SourceKind  # IGNORED | SERVING
    site: SiteFact | None
    mechanism: F.Mechanism | None  # None when no site records
    point: F.Point
    point_note: str
    concat_order: F.ConcatOrder  # loop | config | sorted
    outcome: F.Outcome  # CAPTURES | CAPTURES_NOTHING | REFUSES
    reason: str
    reason_location: F.Location | None
    write: F.GatedWrite | None  # the layout the builder writes for the method
    builder: F.BuilderFact | None
    default: F.MetadataDefaultFact | None  # hook engines: where defaults are applied
    problems: tuple[str, ...]
    post_norm_site: F.Location | None = None  # hook engines: the wrapper's post-final-norm capture
    # Hook engines: the serving paths the class can capture on ("one_model": it subclasses an
    # opt-in base, which builds the draft beside it; "two_model": its layers call the hook).
    modes: tuple[F.ServingMode, ...] = ()

    @property
    def location(self) -> F.Location | None:
        return self.source.location if self.source else (self.site.location if self.site is not None else None)


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _reachable(holders: Holders, qualname: str, depth: int = 3) -> list[str]:
    """The class and what it builds, breadth first (inner model, its layers)."""
    order, frontier = [qualname], [qualname]
    for _ in range(depth):
        nxt = []
        for q in frontier:
            for c in holders.constructed(q):
                if c not in order:
                    order.append(c)
                    nxt.append(c)
        frontier = nxt
    return order


def resolve_source(holders: Holders, row_qualname: str, architectures: tuple[str, ...]) -> SourceCapture | None:
    """The setter-less capture path of one model class, or None when it has none."""
    conv = holders.lookup.conv
    if not (conv.config_keys or conv.context_fields or conv.hooks):
        return None
    idx = holders.lookup.sources
    for holder in _reachable(holders, row_qualname):
        for q in holders.lookup.mro(holder):
            sources = [s for s in idx.id_sources.get(q, []) if s.alias_of is None]
            if sources:
                return _config_capture(holders, idx, holder, q, sources[0], architectures)
    if conv.hooks:  # every registered class of a hook engine answers, opted in or not
        return _hook_capture(holders, idx, row_qualname)
    return None


# -- config attribute / build context ------------------------------------------------------------
def _builders_for(idx: SourceIndex, architectures: tuple[str, ...]) -> list[F.BuilderFact]:
    """Builders whose selector picks one of these architectures (model_type by the HF naming
    convention: the architecture starts with the model type), plus the builders they call."""
    arch_norm = [_norm(a) for a in architectures]
    chosen = []
    for b in idx.builders:
        if b.selector_kind == "architectures" and set(b.selector_values) & set(architectures):
            chosen.append(b)
        elif b.selector_kind == "model_type" and any(
            a.startswith(_norm(v)) for v in b.selector_values for a in arch_norm
        ):
            chosen.append(b)
    by_name = {b.class_qualname: b for b in idx.builders}
    simple = {b.class_qualname.rsplit(".", 1)[-1]: b for b in idx.builders}
    for b in list(chosen):
        for call in b.calls:
            inner = by_name.get(call) or simple.get(call.rsplit(".", 1)[-1])
            if inner is not None and inner not in chosen:
                chosen.append(inner)
    return chosen


def _site_for(
    holders: Holders, idx: SourceIndex, holder: str, attributes: set[str]
) -> F.DictCaptureFact | F.CaptureSiteFact | None:
    for q in holders.lookup.mro(holder):
        for d in idx.dicts.get(q, []):
            if d.attribute in attributes:
                return d
        for s in holders.lookup.sites.get(q, []):
            if s.attribute in attributes or s.attribute is None:
                return s
    return None


def _dict_point(idx: SourceIndex, site: F.DictCaptureFact) -> tuple[F.Point, str]:
    uses = idx.flags.get(site.layer_keyword or "", [])
    if not uses:
        return F.UNKNOWN, f"no layer forward takes a '{site.layer_keyword}' flag"
    use = uses[0]
    where = f"{use.class_qualname.rsplit('.', 1)[-1]}.forward ({use.location})"
    if len(set(use.calls_before)) <= 1 and all("norm" in c for c in use.calls_before):
        return (
            F.INPUT,
            (
                f"{where} records {use.recorded} right after its input"
                f" norm{' (' + use.calls_before[0] + ')' if use.calls_before else ''}, before any other sub-module: the"
                " stream entering layer idx"
            ),
        )
    if not use.calls_after:
        return F.OUTPUT, f"{where} records {use.recorded} after its last sub-module call: the layer's output"
    return (
        F.UNKNOWN,
        f"{where} records {use.recorded} between sub-module calls {use.calls_before[-1]} and {use.calls_after[0]}",
    )


def _config_capture(
    holders: Holders, idx: SourceIndex, holder: str, owner: str, source: F.IdSourceFact, architectures: tuple[str, ...]
) -> SourceCapture:
    conv = holders.lookup.conv
    method = next(iter(sorted(conv.methods)), "")
    attributes = {source.attribute} | {
        s.attribute for s in idx.id_sources.get(owner, []) if s.alias_of == source.attribute
    }
    site = _site_for(holders, idx, holder, attributes)
    problems: list[str] = []
    mechanism: F.Mechanism | None  # None when no site records
    point: F.Point
    if isinstance(site, F.DictCaptureFact):
        point, note = _dict_point(idx, site)
        mechanism, order = F.DICT_STORE, F.ConcatOrder.CONFIG if site.concat else F.ConcatOrder.LOOP
    elif site is not None:
        point, note, mechanism, order = site.point, site.note, site.mechanism, F.ConcatOrder.LOOP
    else:
        point, note, mechanism, order = F.UNKNOWN, "no capture loop reads the ids", None, F.ConcatOrder.LOOP
        problems.append(
            f"{holder.rsplit('.', 1)[-1]} reads {source.key} but no capture loop reading self.{source.attribute} was"
            " found"
        )
    builders = _builders_for(idx, architectures)
    refusing = next((b for b in builders if b.allowed_methods is not None and method not in b.allowed_methods), None)
    write = builder = None
    if source.kind == "config":
        for b in builders:
            w = next((w for w in b.writes if w.key == source.key and method in w.methods), None)
            if w is not None:
                write, builder = w, b
                break
    else:
        write = next((w for w in idx.feeds if method in w.methods), None)
    outcome, reason, where = _outcome(source, method, refusing, write, builders, idx)
    return SourceCapture(
        F.IdSourceKind(source.kind), holder, source.key, source, IGNORED, site, mechanism, point, note, order,
        outcome, reason, where, write, builder, None, tuple(problems),
    )


def _outcome(
    source: F.IdSourceFact,
    method: str,
    refusing: F.BuilderFact | None,
    write: F.GatedWrite | None,
    builders: list[F.BuilderFact],
    idx: SourceIndex,
) -> tuple[F.Outcome, str, F.Location | None]:
    if refusing is not None:
        allowed = ", ".join(refusing.allowed_methods or ())
        return (
            REFUSES,
            f"{refusing.class_qualname.rsplit('.', 1)[-1]} accepts only {allowed}: method {method!r} is refused",
            refusing.gate_location,
        )
    if write is not None:
        via = f"{write.key} = {write.expression}"
        return (
            CAPTURES,
            f"written by the engine for method {method!r}: {via} (the draft's ids are not read)",
            write.location,
        )
    if source.kind == "context":
        others = sorted({m for w in idx.feeds for m in _other_methods(w)})
        first = idx.feeds[0].location if idx.feeds else None
        filled = f"filled only when {idx.feeds[0].condition}" if idx.feeds else "never filled"
        return (
            CAPTURES_NOTHING,
            (
                f"the build-context field {source.key} is {filled}{(' (' + ', '.join(others) + ')') if others else ''};"
                f" for {method!r} it stays {source.default or 'empty'} and nothing is captured"
            ),
            first,
        )
    names = (
        ", ".join(b.class_qualname.rsplit(".", 1)[-1] for b in builders)
        or "no config builder selected for this architecture"
    )
    return (
        CAPTURES_NOTHING,
        (
            f"no config builder writes {source.key} for method {method!r} ({names}); the model reads the default"
            f" {source.default or '()'} and captures nothing"
        ),
        source.location,
    )


def _other_methods(write: F.GatedWrite) -> list[str]:
    return re.findall(r"==\s*'([^']+)'", write.condition) + re.findall(r'==\s*"([^"]+)"', write.condition)


# -- metadata hook (serving-config ids) ------------------------------------------------------------
def opts_in(lookup: ClassLookup, qualname: str) -> bool:
    names = lookup.conv.opt_in_bases
    if not names:
        return False
    return any(q.rsplit(".", 1)[-1] in names for q in lookup.mro(qualname)[1:])


def _hook_capture(holders: Holders, idx: SourceIndex, qualname: str) -> SourceCapture:
    """A metadata-hook path. The layers a class builds calling the hook make it capture on the
    two-model path (the metadata is handed down; the draft runs as its own model); subclassing
    an opt-in base adds the one-model path (the base builds the draft beside it and records the
    post-final-norm id). Layers that never call it leave the buffer's slots unwritten."""
    conv = holders.lookup.conv
    key = conv.serving_keys[0] if conv.serving_keys else "serving config"
    default = next((d for d in idx.defaults if d.method == "__post_init__"), idx.defaults[0] if idx.defaults else None)
    opt_in = next((q for q in holders.lookup.mro(qualname)[1:] if q.rsplit(".", 1)[-1] in conv.opt_in_bases), None)
    base = (opt_in or "").rsplit(".", 1)[-1] or "/".join(sorted(conv.opt_in_bases)) or "an opt-in base"
    for holder in _reachable(holders, qualname):
        if holder == qualname or holder == opt_in:
            continue
        layer_sites = [
            h
            for q in holders.lookup.mro(holder)
            for h in idx.hooks.get(q, [])
            if h.index.rsplit(".", 1)[-1] in conv.layer_index_attributes
        ]
        if not layer_sites:
            continue
        site = layer_sites[0]
        point, note = _hook_point(site)
        wrapper = next((h.location for h in idx.hooks.get(opt_in or "", [])), None)
        calls = (
            f"{site.function} calls {site.hook}({site.index}, {', '.join(site.arguments)}); ids come from the serving"
            f" config's {key}, sorted"
        )
        if opt_in is None:
            calls += (
                f"; two-model path only: {qualname.rsplit('.', 1)[-1]} does not subclass {base}, so the one-model path "
                "(the draft built beside the target) is not available to it"
            )
        modes = (F.ServingMode.ONE_MODEL, F.ServingMode.TWO_MODEL) if opt_in else (F.ServingMode.TWO_MODEL,)
        return SourceCapture(
            HOOK,
            holder,
            key,
            None,
            SERVING,
            site,
            F.HOOK,
            point,
            note,
            F.ConcatOrder.SORTED,
            CAPTURES,
            calls,
            site.location,
            None,
            None,
            default,
            (),
            wrapper,
            modes,
        )
    where = (
        holders.lookup.classes[opt_in].location
        if opt_in in holders.lookup.classes
        else holders.lookup.classes[qualname].location if qualname in holders.lookup.classes else None
    )
    how = f"opts in through {base}, but" if opt_in else f"does not subclass {base}, and"
    return SourceCapture(
        HOOK,
        qualname,
        key,
        None,
        SERVING,
        None,
        F.HOOK,
        F.UNKNOWN,
        "no decoder layer built by this model calls the hook",
        F.ConcatOrder.SORTED,
        CAPTURES_NOTHING,
        f"{qualname.rsplit('.', 1)[-1]} {how} no layer it builds calls {'/'.join(sorted(conv.hooks))}: the captured"
        " slots of the preallocated buffer are never written and the draft reads uninitialised memory (no error is"
        " raised)",
        where,
        None,
        None,
        default,
        (),
        None,
        (F.ServingMode.ONE_MODEL,) if opt_in else (),
    )


_FEED_FORWARD = ("mlp", "moe", "ffn", "feed_forward", "experts")


def _hook_point(site: F.HookCallFact) -> tuple[F.Point, str]:
    """After the layer's feed-forward sub-module (and before any other but norms or the fused
    all-reduce that applies the next layer's norm): the layer's output.

    Decided by what the code does first: the recorded state is the output of a sub-module
    called after another one (the attention) and nothing applied to it alone after the hook
    (a sub-module also taking the residual finishes the residual add): the layer's output,
    whatever the sub-module is called. The feed-forward names are hints for the rest."""
    structural = _hook_point_by_flow(site)
    if structural is not None:
        return structural
    ff_before = [c for c in site.calls_before if any(w in c for w in _FEED_FORWARD)]
    ff_after = [c for c in site.calls_after if any(w in c for w in _FEED_FORWARD)]
    if ff_before and not ff_after:
        return (
            F.OUTPUT,
            (
                f"{site.function} calls {site.hook} after {ff_before[-1]}, its feed-forward sub-module: records layer"
                f" {site.index}'s output (hidden + residual)"
            ),
        )
    if site.calls_before and all("norm" in c for c in site.calls_after):
        last = [c for c in site.calls_before if "norm" not in c]
        return (
            F.OUTPUT,
            (
                f"{site.function} calls {site.hook} after {last[-1] if last else site.calls_before[-1]}, its last"
                f" sub-module: records layer {site.index}'s output (hidden + residual)"
            ),
        )
    return F.UNKNOWN, f"{site.function} calls {site.hook} between sub-module calls"


def _hook_point_by_flow(site: F.HookCallFact) -> tuple[F.Point, str] | None:
    """The point from the recorded state's data flow (:func:`_hook_point`), None when it does
    not decide."""
    recorded = site.arguments[0] if site.arguments else "the state"
    if site.reworked_after:
        return (
            F.UNKNOWN,
            (
                f"{site.function} calls {site.hook}, then applies self.{site.reworked_after[0]} to `{recorded}` alone: "
                "the layer keeps computing on the recorded state, so it is a state inside the layer"
            ),
        )
    fed = site.fed_by
    if fed is None or fed not in site.calls_before or site.calls_before.index(fed) == 0:
        return None
    earlier = ", ".join(dict.fromkeys(site.calls_before[: site.calls_before.index(fed)]))
    return (
        F.OUTPUT,
        (
            f"{site.function} calls {site.hook} with `{recorded}` = self.{fed}(...) (called after {earlier}), "
            f"which nothing applied to it alone follows: records layer {site.index}'s output (hidden + residual)"
        ),
    )

"""Which classes are EAGLE-3 targets, and the engine facts the rules share.

A registered generation model is an EAGLE-3 target unless the profile says it is served as a
draft (MTP / NextN / EAGLE heads; :mod:`flowtrace.analysis.categories` decides, for every
output alike) or does not decode autoregressively (block diffusion).
Rules that say "cannot capture" only speak about targets: a draft head without a setter is
not a defect.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flowtrace.analysis.categories import project_drafts
from flowtrace.engines.check_conventions import CheckConventions, check_conventions
from flowtrace.engines.methods import LEGACY
from flowtrace.model.consequence import Consequence
from flowtrace.model.links import NOT_BREAKING

if TYPE_CHECKING:
    from flowtrace.analysis.class_lookup import ClassLookup
    from flowtrace.analysis.resolve import ModelRow, Project
    from flowtrace.model.facts import AttributeUseFact
    from flowtrace.analysis.scan import ScanResult

_CACHE_ATTR = "_flowtrace_check_conventions"


def conventions(result: ScanResult) -> CheckConventions:
    """The ``[checks]`` conventions of the scan's profiles (memoised on the project)."""
    project = result.project
    cached = getattr(project, _CACHE_ATTR, None)
    if cached is None:
        cached = check_conventions(result.profiles, result.method_asked)
        setattr(project, _CACHE_ATTR, cached)
    return cached


def method_title(result: ScanResult) -> str:
    """The speculative method the findings are about, as the profile labels it (messages name
    it: the default method's label is what they always said)."""
    chosen = result.method
    return chosen.title if chosen is not None else LEGACY[1]


def is_target(row: ModelRow, project: Project, cc: CheckConventions) -> bool:
    """A generation model the engine may serve an EAGLE-3 draft for."""
    if not row.generation_target or row.qualname in project_drafts(project, cc):
        return False  # a draft (what every output calls ``draft``) consumes the states
    classes = project.lookup.classes
    first = next((classes[q].name for q in project.lookup.mro(row.qualname) if q in classes), None)
    if (first is not None and cc.is_draft_class(first)) or cc.is_draft_class(row.name):
        return False
    return not cc.is_non_target([row.name, *row.architectures])


def first_forward_failure(result: ScanResult, error: str, *, with_ids: bool = False) -> tuple[Consequence, str]:
    """When an error the target's forward raises with the aux capture on (``error``: "a
    ValueError at the unpacking") is met: at start-up where the engine runs that forward while
    it starts (the profile's ``startup_forward``, quoted: an error that does not say why,
    ``crash_startup``) after its runner set the layers (``with_ids``: the draft's ids, not the
    model's defaults), else on the first forward that serves a draft (``crash_serving``)."""
    where = conventions(result).startup_forward
    if where and _set_before_capture(result, with_ids):
        return Consequence.CRASH_STARTUP, f"start-up fails with {error} that does not say why: {where}"
    if where:
        what = "the draft's ids" if with_ids else "the layers"
        return (
            Consequence.CRASH_SERVING,
            (
                f"the first forward that serves a draft raises {error} (the engine captures its graphs at start-up"
                f" before its runner sets {what}, so start-up passes)"
            ),
        )
    return Consequence.CRASH_SERVING, f"the first forward that serves a draft raises {error}"


def _set_before_capture(result: ScanResult, with_ids: bool) -> bool:
    """The runner sets the layers (``with_ids``: the draft's ids) before a graph capture on a
    start-up way of its serving plan (:mod:`flowtrace.analysis.serving`); where the plan is not
    known, the profile's ``startup_forward`` holds as written."""
    from flowtrace.analysis.serving import serving_plan

    plan = serving_plan(result.project.lookup)
    if not plan.known:
        return True
    return any(not (with_ids and c.default) for p in plan.startup for g in p.captures for c in g.before)


def unpack_failure(result: ScanResult) -> tuple[Consequence, str]:
    """A forward that returns one value where ``(hidden, aux)`` is unpacked (see
    :func:`first_forward_failure`): any setter call turns the unpacking on."""
    return first_forward_failure(result, "a ValueError at the unpacking")


def short(qualname: str | None) -> str:
    return (qualname or "?").rsplit(".", 1)[-1]


def methods_on_mro(lookup: ClassLookup, qualname: str) -> set[str]:
    out: set[str] = set()
    for q in lookup.mro(qualname):
        cls = lookup.classes.get(q)
        if cls is not None:
            out.update(cls.methods)
    return out


def wrapper_bases(lookup: ClassLookup, qualname: str, entry_points: tuple[str, ...]) -> list[str]:
    """The bases of a wrapper, nearest first, where one delegating method would serve the whole
    family: a model class of the tree (not an interface or holder the profile names) that
    defines a speculative entry point itself (its forward runs the wrapped model) and none of
    whose subclasses has a setter (the gap is the base's, not one subclass's)."""
    conv = lookup.conv
    skip = set(conv.interfaces) | set(conv.holders)
    methods = set(entry_points) or {"forward"}
    out = []
    for base in lookup.mro(qualname)[1:]:
        cls = lookup.classes.get(base)
        if cls is None or cls.name in skip or not methods & set(cls.methods):
            continue
        if all(lookup.find_setter(q) is None for q in _subclasses(lookup, base)):
            out.append(base)
    return out


def _subclasses(lookup: ClassLookup, base: str) -> list[str]:
    return [q for q in lookup.classes if base in lookup.mro(q)]


def capture_works(project: Project, qualname: str) -> bool:
    """The class's own capture path resolves to a capture site with no problem that breaks
    the chain (selected on the problems' kinds)."""
    capture = project.captures.resolve_capture(qualname)
    chain = project.chain_of(qualname, capture, None) if capture is not None else None
    return chain is not None and chain.site is not None and not chain.kinds() - NOT_BREAKING


def family_writers(result: ScanResult, cc: CheckConventions) -> dict[str, list[AttributeUseFact]]:
    """Writer class -> attribute writes done by another capture family's setter."""
    attributes = set(result.project.conv.attributes) | set(result.project.conv.flags)
    out: dict[str, list[AttributeUseFact]] = {}
    for ff in result.files:
        for use in ff.attribute_uses:
            method = use.function.split(".")[-1]
            if use.kind == "write" and use.attribute in attributes and cc.family_of(method) is not None:
                out.setdefault(use.class_qualname, []).append(use)
    return out

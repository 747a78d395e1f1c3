"""From the rules' raw findings to what a maintainer should read: graded, reachable, once per cause.

Three steps, after every rule has run:

1. **Consequence.** Each finding has one (stated by its rule for this finding, else the rule's
   declared default); severity follows from it in
   :func:`flowtrace.model.consequence.severity_of` and nowhere else.
2. **Reachability.** A finding that says a draft is served wrong states or crashes the engine
   needs a path from a registered entry the engine accepts at start-up, with ids a draft can
   send (:mod:`flowtrace.analysis.reachability`); without one it is ``unreachable`` and
   reported nowhere. The path is kept on the finding (``entry_path``).
3. **One finding per root cause.** Per-platform copies of one class, and several rules firing
   on the same statement, are one finding at the first place with the others as ``related``
   locations (SARIF ``relatedLocations``, "and N more" in text). The kept finding's
   fingerprint is its own, so a baseline written before the merge still matches it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Iterable

from flowtrace.analysis.categories import project_drafts
from flowtrace.analysis.platform_copies import build_test, never_selected, runs_nowhere, selection
from flowtrace.analysis.reachability import Reachability, fixed_layout, layout_can_name
from flowtrace.checks.targets import conventions, is_target, method_title
from flowtrace.model.consequence import Consequence, severity_of, worst
from flowtrace.model.facts import Location, ProblemKind

if TYPE_CHECKING:
    from flowtrace.analysis.scan import ScanResult
    from flowtrace.checks.base import Finding

# Consequences that only matter when a served draft runs the code.
_NEEDS_PATH = frozenset(
    {Consequence.SILENT_WRONG, Consequence.CRASH_SERVING, Consequence.CRASH_STARTUP, Consequence.FRAGILE}
)

# Problems of the draft side: about the class the engine loads a draft with, which no path from a
# target entry reaches; such a finding needs the class registered instead.
_DRAFT_SIDE = frozenset({ProblemKind.DRAFT_FC_FIXED_COUNT})

# Words for a finding whose rule did not say its consequence itself ({method}: the method's label).
_EFFECT = {
    Consequence.SILENT_WRONG: "the draft silently receives other hidden states than it was trained on; nothing fails",
    Consequence.CRASH_SERVING: "a request the engine accepted at start-up raises in a forward",
    Consequence.CRASH_STARTUP: "the model claims {method} support and start-up dies on an error that does not say why",
    Consequence.FRAGILE: "works with today's drafts; a draft written in another id convention gets other states",
    Consequence.REFUSED_STARTUP: "the engine refuses this model for {method} at start-up: unsupported, not wrong",
}


def grade(result: ScanResult, findings: Iterable[Finding]) -> list[Finding]:
    """Graded, reachable, deduplicated findings, in the runner's order."""
    reach = _reachability(result)
    kept = [g for g in (_graded(result, reach, f) for f in findings) if g is not None]
    return [_on_platform(result, f) for f in merge_causes(kept)]


def _on_platform(result: ScanResult, f: Finding) -> Finding:
    """Name the platform of a finding in a per-platform copy (a module its package imports only
    under a condition, :mod:`flowtrace.analysis.platform_copies`): the defect reaches a draft
    only there. The severity stays what the consequence is on that platform; the words say
    where, quoting the engine's own condition, for the finding and each merged copy."""
    if not f.symbol:
        return f
    files = list(dict.fromkeys([f.file, *(w.file for w in f.related)]))
    chosen = [(file, selection(result.index, file)) for file in files]
    said = [f"{file} {sel.words()} ({sel.where})" for file, sel in chosen if sel is not None]
    if not said or chosen[0][1] is None:
        return f
    head = chosen[0][1]
    assert head is not None
    effect = (f.effect or "") + f" (only where the package imports this copy: {head.words()}, {head.where})"
    return dataclasses.replace(f, message=f"{f.message} [per-platform copy: {'; '.join(said)}]", effect=effect.lstrip())


def _reachability(result: ScanResult) -> Reachability:
    cc = conventions(result)
    return Reachability(result.project, lambda row: is_target(row, result.project, cc))


def _graded(result: ScanResult, reach: Reachability, f: Finding) -> Finding | None:
    consequence = f.consequence
    if _names_class(result, f.symbol) and (_left_behind(result, f.file) or _other_platform(result, f.file)):
        return None  # a per-platform copy no platform of this build imports
    path = None
    if (
        consequence in _NEEDS_PATH
        and f.kind in _DRAFT_SIDE
        and _names_class(result, f.symbol)
        and _is_draft(result, f.symbol)
    ):
        if not any(r.registered and r.qualname == f.symbol for r in result.rows):
            return None  # a draft class the engine never loads
    elif consequence in _NEEDS_PATH and _names_class(result, f.symbol):
        found = reach.path_to(f.symbol)
        if found is None or not _ids_can_reach(result, f):
            return None  # unreachable: no served draft runs this code
        path = found.words()
    severity = severity_of(consequence)
    if severity is None:
        return None
    effect = f.effect or _default_effect(result, f, consequence)
    return dataclasses.replace(
        f, consequence=consequence, severity=severity, effect=effect, entry_path=path or f.entry_path
    )


def _is_draft(result: ScanResult, symbol: str | None) -> bool:
    """The finding is about a draft class (the engine loads it for a draft; no target path leads to it)."""
    return symbol is not None and symbol in project_drafts(result.project, conventions(result))


def _left_behind(result: ScanResult, file: str) -> bool:
    """A copy in a subpackage that the package's dispatching ``__init__.py`` never names, and
    that no indexed module outside it imports."""
    where = never_selected(result.index, file)
    if where is None:
        return False
    package = where.file.rsplit("/", 1)[0]
    sub = file[len(package) + 1:].split("/", 1)[0]
    inside = f"{package}/{sub}/"
    dotted = f"{package}/{sub}".replace("/", ".")
    return not any(
        i.qualified == dotted or i.qualified.startswith(dotted + ".")
        for ff in result.files if not ff.path.startswith(inside) for i in ff.imports
    )


def _other_platform(result: ScanResult, file: str) -> bool:
    """A copy imported only on platforms a one-platform build (profile ``platform_builds``)
    never is (a CPU-only wheel's copy for a GPU vendor)."""
    test = build_test(result.index, conventions(result).platform_builds)
    if test is None:
        return False
    chosen = selection(result.index, file)
    return chosen is not None and runs_nowhere(chosen, test)


def _default_effect(result: ScanResult, f: Finding, consequence: Consequence | None) -> str | None:
    """Words for a finding whose rule did not state its consequence: a refusal quotes what the
    engine raises (the profile's ``startup_refusal``), the rest say what the draft gets."""
    if consequence is Consequence.REFUSED_STARTUP:
        said = conventions(result).startup_refusal
        if said:
            return "the engine refuses this model at start-up: " + said.replace("<class>", _class_name(f.symbol))
    words = _EFFECT.get(consequence) if consequence is not None else None
    return words.format(method=method_title(result)) if words is not None else None


def _names_class(result: ScanResult, symbol: str | None) -> bool:
    """The finding is about a model class (or one of its methods); draft-side and file-level
    findings are not on a path from a target entry."""
    if not symbol:
        return False
    classes = result.project.lookup.classes
    return symbol in classes or symbol.rsplit(".", 1)[0] in classes


def _ids_can_reach(result: ScanResult, f: Finding) -> bool:
    """A first-index crash needs a draft able to ask for that index: not so where every
    served class capturing at that site uses a layout the engine writes itself."""
    if f.kind is not ProblemKind.INDEX0_RAISES:
        return True
    owner = f.symbol or ""
    users = [
        r
        for r in result.rows
        if r.registered
        and r.chain is not None
        and not r.chain.setter_driven
        and r.chain.holder is not None
        and r.chain.holder.holder == owner
    ]
    if not users:
        return True
    for row in users:
        write = fixed_layout(row)
        if write is None or layout_can_name(write, 0) is not False:
            return True
    return False


def _cause(f: Finding) -> tuple[object, ...]:
    """What makes two findings one cause: the same rule on the same class name (per-platform
    copies differ only in their package path), with the same message once paths are gone."""
    if not f.symbol:
        return (f.rule, f.file, f.line, f.fingerprint)  # a finding about a file, not a class: never merged
    name = f.symbol.rsplit(".", 2)
    short = ".".join(name[-2:]) if "." in f.symbol else f.symbol
    words = re.sub(r"[\w./-]+\.py:\d+", "", f.message)
    return (f.rule, f.kind, short, words)


def merge_causes(findings: list[Finding]) -> list[Finding]:
    """One finding per root cause: platform copies grouped by :func:`_cause`, and findings of
    several rules on one statement grouped by place (the worst consequence stays)."""
    out: list[Finding] = []
    for group in _groups(findings, _cause):
        out.append(_merged(group))
    final: list[Finding] = []
    for group in _groups(out, _place):
        final.append(_merged(sorted(group, key=_rank)) if len(group) > 1 else group[0])
    return sorted(final, key=lambda f: (f.file, f.line, f.rule, f.fingerprint))


# Problems that are one cause when they sit on the same statement: what a setter does to the
# draft's ids (an inconsistent transform and the embedding id it drops are one fix).
_ID_CONVENTION = frozenset({
    ProblemKind.TRANSFORM_INCONSISTENT, ProblemKind.EMBEDDING_ID_DROPPED,
    ProblemKind.EMBEDDING_UNREACHABLE, ProblemKind.DEFAULT_BOUNDARIES_SHIFTED,
})


def _place(f: Finding) -> tuple[str, int, str]:
    """Findings grouped by place: the rule's own, except id-convention findings, which share one."""
    group = "ids" if f.kind in _ID_CONVENTION else f.rule
    return (f.file, f.line, group)


def _rank(f: Finding) -> tuple[int, str]:
    order = tuple(Consequence)
    return (order.index(f.consequence) if f.consequence is not None else len(order), f.rule)


def _groups(findings: list[Finding], key: Callable[[Finding], Hashable]) -> list[list[Finding]]:
    groups: dict[Hashable, list[Finding]] = {}
    for f in sorted(findings, key=lambda f: (f.file, f.line, f.rule, f.symbol or "", f.fingerprint)):
        groups.setdefault(key(f), []).append(f)
    return list(groups.values())


def _merged(group: list[Finding]) -> Finding:
    head = group[0]
    if len(group) == 1:
        return head
    places: dict[Location, None] = dict.fromkeys(head.related)
    for other in group[1:]:
        places.setdefault(Location(other.file, other.line), None)
        places.update(dict.fromkeys(other.related))
    places.pop(Location(head.file, head.line), None)
    consequences = tuple(f.consequence for f in group if f.consequence is not None)
    consequence = worst(consequences) if consequences else head.consequence
    also = sorted({f.rule for f in group[1:]} - {head.rule})
    message = head.message + (f" (same cause as {', '.join(also)})" if also else "")
    for other in group[1:]:
        if other.rule != head.rule:
            message += f". {other.rule}: {other.message}"
    others = sorted({_class_name(f.symbol) for f in group[1:]} - {_class_name(head.symbol)})
    if others:
        message += f"; also affects {_listed(others)}"
    effects = list(dict.fromkeys(f.effect for f in group if f.effect))
    # every class a merged finding concerned stays named by the one kept
    affects = {a for f in group for a in f.affects} | {f.symbol for f in group[1:] if f.symbol}
    return dataclasses.replace(
        head,
        affects=tuple(sorted(affects - {head.symbol})),
        effect="; ".join(effects) or head.effect,
        related=tuple(places),
        consequence=consequence,
        severity=(severity_of(consequence) if consequence is not None else None) or head.severity,
        message=message,
        causes=tuple(f for f in group[1:] if f.rule != head.rule),
    )


def _class_name(symbol: str | None) -> str:
    parts = (symbol or "?").split(".")
    classes = [p for p in parts if p[:1].isupper()]
    return classes[-1] if classes else parts[-1]


def _listed(names: list[str], shown: int = 4) -> str:
    head = ", ".join(names[:shown])
    return head + (f" and {len(names) - shown} more" if len(names) > shown else "")

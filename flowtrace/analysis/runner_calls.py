"""What the engine's runner does with a model class that lacks the entry setter.

The index records each runner call of an entry setter and the check guarding it
(:class:`flowtrace.model.facts.EntryCallFact`). For one class this decides, per call site,
whether the runner raises there (an unguarded call: ``AttributeError``; a check that raises)
or skips the call (a check that only warns): the trace of a setter-less class ends in
``raises`` at the first site that raises, and stays ``captures_nothing`` only when every site
is guarded.
"""

from __future__ import annotations

from dataclasses import dataclass

from flowtrace.analysis.class_lookup import ClassLookup
from flowtrace.model import facts as F


@dataclass(frozen=True, slots=True)
class RunnerVerdict:
    """One call site's effect on a class that fails its requirement."""

    call: F.EntryCallFact
    raises: bool
    text: str  # what happens there, for the trace step and the reason


def _has_method(lookup: ClassLookup, qualname: str, method: str) -> bool:
    return any(method in lookup.classes[q].methods for q in lookup.mro(qualname) if q in lookup.classes)


def _has_interface(lookup: ClassLookup, qualname: str, interface: str) -> bool:
    """The interface among the class's bases, resolved or only written (``SupportsX`` imported
    from a file the scan did not read still counts)."""
    for q in lookup.mro(qualname):
        if q.rsplit(".", 1)[-1] == interface:
            return True
        cls = lookup.classes.get(q)
        if cls is not None and any(b.rsplit(".", 1)[-1] == interface for b in cls.bases):
            return True
    return False


def _predicates(lookup: ClassLookup) -> dict[str, str]:
    return {p.name: p.interface for ff in lookup.files for p in ff.interface_predicates}


def _fails(lookup: ClassLookup, qualname: str, call: F.EntryCallFact, predicates: dict[str, str]) -> str | None:
    """What the class lacks at this call site (text), or None when it passes or the check
    cannot be read (a predicate the scan never saw defined)."""
    kind, _, name = call.requires.partition(":")
    if call.guard == F.EntryGuard.NONE or kind == "method":
        method = name or call.method
        return None if _has_method(lookup, qualname, method) else f"has no method {method}"
    interface = predicates.get(name) if kind == "predicate" else name
    if interface is None:
        return None
    return None if _has_interface(lookup, qualname, interface) else f"does not declare {interface}"


def runner_verdicts(lookup: ClassLookup, qualname: str) -> list[RunnerVerdict]:
    """Every runner call site where this class fails the requirement, in file order."""
    predicates = _predicates(lookup)
    calls = sorted(
        (c for ff in lookup.files for c in ff.entry_calls), key=lambda c: (c.location.file, c.location.line)
    )
    name = qualname.rsplit(".", 1)[-1]
    out = []
    for call in calls:
        lacks = _fails(lookup, qualname, call, predicates)
        if lacks is None:
            continue
        where = call.function
        if call.guard == F.EntryGuard.NONE:
            text = f"the runner ({where}) calls {call.method} on the model unguarded; {name} {lacks}: AttributeError"
        elif call.guard == F.EntryGuard.RAISES:
            text = f"the runner ({where}) checks `{call.condition}` before {call.method} and raises: {name} {lacks}"
        else:
            text = f"the runner ({where}) checks `{call.condition}` and skips {call.method}: {name} {lacks}"
        out.append(RunnerVerdict(call, call.guard != F.EntryGuard.SKIPS and call.raises_at is not None, text))
    return out

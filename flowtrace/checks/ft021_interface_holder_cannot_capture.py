"""FT021 interface-holder-cannot-capture: a class declares the engine's capture interface, but the holder its setter
reaches lacks the capture mixin."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, NamedTuple

from flowtrace.model.consequence import Consequence
from flowtrace.checks.base import Example, Finding, Rule
from flowtrace.checks.targets import conventions, is_target, method_title, short
from flowtrace.model import facts as F
from flowtrace.model.facts import ProblemKind

if TYPE_CHECKING:
    from flowtrace.analysis.capture import Capture
    from flowtrace.analysis.class_lookup import ClassLookup
    from flowtrace.analysis.holders import Holders
    from flowtrace.analysis.resolve import ModelRow
    from flowtrace.analysis.scan import ScanResult


class HolderStep(NamedTuple):
    """One step of an interface's holder path, as the instance builds it."""

    owner: str  # the class that assigns the attribute (nearest in the MRO)
    assignment: F.AttributeAssignment
    built: str  # the class it builds
    overriding: str | None  # the more derived class that changes what it builds, or None


def _assignment(lookup: ClassLookup, qualname: str, attribute: str) -> tuple[str, F.AttributeAssignment] | None:
    """(class that assigns it, assignment) nearest in the MRO, or None."""
    for q in lookup.mro(qualname):
        cls = lookup.classes.get(q)
        for a in cls.assignments if cls else ():
            if a.attribute == attribute:
                return q, a
    return None


def _overridden(lookup: ClassLookup, qualname: str, attribute: str) -> str | None:
    """The base class whose own assignment of ``attribute`` the class's assignment replaces."""
    for q in lookup.mro(qualname)[1:]:
        cls = lookup.classes.get(q)
        if cls and any(a.attribute == attribute for a in cls.assignments):
            return q
    return None


def _overriding(holders: Holders, mro: list[str], assignment: F.AttributeAssignment) -> str | None:
    """The class more derived than the assignment's whose class attribute or factory method
    decides what it builds (``model_cls = Other`` in a subclass), as
    :meth:`Holders.overridden_callee` picks it; None when none does."""
    for n in range(len(mro)):
        if holders.overridden_callee(mro[n : n + 1], assignment):
            return mro[n]
    return None


def walk_holder(holders: Holders, qualname: str, path: tuple[str, ...]) -> tuple[str, list[HolderStep]] | None:
    """Follow the interface's holder path; None when a step is built dynamically (unresolvable).

    Each step is what the instance really builds: the nearest assignment in the MRO, with
    what a more derived class changes about it (a class attribute the base's ``__init__``
    builds from, an overriding factory method), the most derived value winning, as the
    capture chain resolves it (:meth:`Holders.attribute_class`). Steps are (class assigning,
    assignment, class built, class overriding it or None)."""
    steps: list[HolderStep] = []
    current = qualname
    for attribute in path:
        found = _assignment(holders.lookup, current, attribute)
        if found is None:
            continue  # an optional step the object does not have
        owner, assignment = found
        mro = holders.lookup.mro(current)
        derived = mro[: mro.index(owner)]
        callee = holders.overridden_callee(derived, assignment) or assignment.callee
        target = holders.lookup.find_class(callee, near=owner)
        if target is None:
            return None  # built from the config at run time: conditional, not decidable here
        steps.append(HolderStep(owner, assignment, target, _overriding(holders, derived, assignment)))
        current = target
    return current, steps


class InterfaceHolderCannotCapture(Rule):
    code = "FT021"
    name = "interface-holder-cannot-capture"
    consequence = Consequence.CRASH_STARTUP
    kind = ProblemKind.INTERFACE_HOLDER_CANNOT_CAPTURE
    summary = (
        "A class declares the engine's capture interface, but the holder its setter reaches lacks the capture mixin."
    )
    rationale = (
        "The interface's setter walks from the model to a holder (the language model, then its inner "
        "model) and requires the holder to be the engine's capture mixin. A holder built without it, often "
        "because a wrapper builds its own language model and overrides the one its base builds, makes "
        "the setter fail at start-up: the declared support is false."
    )
    fix = (
        "Make the holder inherit the engine's capture mixin and record states in its layer loop, or drop the interface"
        " from the class."
    )
    valid = (
        Example(
            """\
class ExTextModel(Module, EagleModelMixin):
    def __init__(self, config):
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.layers = []

    def forward(self, positions, hidden_states):
        residual = None
        aux_hidden_states = []
        self._maybe_add_hidden_state(aux_hidden_states, self.start_layer, hidden_states, residual)
        for idx in range(self.start_layer, self.end_layer):
            hidden_states, residual = self.layers[idx](positions, hidden_states, residual)
            self._maybe_add_hidden_state(aux_hidden_states, idx + 1, hidden_states, residual)
        return hidden_states, aux_hidden_states


class ExForCausalLM(Module, SupportsEagle3):
    def __init__(self, config):
        self.model = ExTextModel(config)
""", profile='vllm'
        ),
    )
    invalid = (
        Example(
            """\
class ExTextModel(Module):  # no EagleModelMixin
    def __init__(self, config):
        self.layers = []

    def forward(self, positions, hidden_states):
        return hidden_states


class ExForCausalLM(Module, SupportsEagle3):
    def __init__(self, config):
        self.model = ExTextModel(config)
""",
            profile="vllm",
            line=9,
            kind=ProblemKind.INTERFACE_HOLDER_CANNOT_CAPTURE,
            message="reaches self.model = ExTextModel",
            consequence=Consequence.CRASH_STARTUP,
            severity="warning",
        ),
    )

    def check(self, result: ScanResult) -> Iterator[Finding]:
        project = result.project
        cc = conventions(result)
        interfaces, holders = project.conv.interfaces, project.conv.holders
        if not interfaces or not holders or not cc.interface_holder_path:
            return
        for row in result.rows:
            c, chain = row.capture, row.chain
            if (
                c is None
                or chain is None
                or not is_target(row, project, cc)
                or project.lookup.classes.get(chain.transforms[0].owner, None) is None
            ):
                continue
            if project.lookup.classes[chain.transforms[0].owner].name not in interfaces:
                continue  # the class overrides the interface's setter: its own path is judged elsewhere
            walked = walk_holder(project.holders, row.qualname, cc.interface_holder_path)
            if walked is None:
                continue
            holder, steps = walked
            if not steps:
                continue  # no holder built in __init__: the language model comes from a getter or the config
            classes = project.lookup.classes
            if any(classes[q].name in holders for q in project.lookup.mro(holder) if q in classes):
                continue
            yield self._finding(result, row, holder, steps, sorted(holders), c)

    def _finding(
        self,
        result: ScanResult,
        row: ModelRow,
        holder: str,
        steps: list[HolderStep],
        holders: list[str],
        capture: Capture,
    ) -> Finding:
        project = result.project
        path = "".join(f".{a.attribute}" for _, a, _, _ in steps) or " itself"
        where = [F.Location(project.lookup.classes[owner].location.file, a.line) for owner, a, _, _ in steps]
        overrides = [project.lookup.classes[o].location for _, _, _, o in steps if o in project.lookup.classes]
        note = ""
        if steps:
            owner, assignment, target, overriding = steps[-1]
            base = _overridden(project.lookup, owner, assignment.attribute)
            if overriding is not None:
                via = (assignment.via or "").partition(":")[2].partition("#")[0]
                note = (
                    f" ({short(overriding)} makes {short(owner)}'s self.{assignment.attribute} = ... build"
                    f" {short(target)} through {via or 'an override'})"
                )
            elif base is not None and owner != row.qualname:
                note = f" ({short(owner)} builds its own {assignment.attribute}, overriding {short(base)}'s)"
        message = (
            f"{row.name} declares {', '.join(sorted(project.conv.interfaces))}, but its setter"
            f" ({capture.setter.location}) reaches self{path} = {short(holder)}{note}, which is not a"
            f" {' or '.join(holders)}: setting the layers fails at start-up"
        )
        flow = (
            ("class declaring the interface", row.location),
            *(("holder path step", w) for w in where),
            *(("override of what it builds", w) for w in overrides),
            ("holder without the mixin", project.lookup.classes[holder].location),
        )
        return self.finding(
            row.location,
            message,
            row.qualname,
            f"{path}:{holder}",
            steps=flow,
            effect=(
                f"the model declares {method_title(result)} support, and start-up dies in its interface setter: it"
                f" checks that self{path} is a {' or '.join(holders)} and raises an AssertionError that does not say"
                " the model is unsupported, before any draft is served"
            ),
        )

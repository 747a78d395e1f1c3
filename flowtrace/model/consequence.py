"""What a finding does to a user, and the one place severity follows from it.

A lint is trusted when ``error`` means what users fear: the draft silently receives other
states than it was trained on, or a request the engine accepted at start-up raises while
serving. A loud refusal at start-up is a missing feature (``info``: unsupported, and how to
add it); code that works today but breaks on a convention change is at most a ``warning``;
code no registered entry reaches with ids a draft can send reports nothing.
"""

from __future__ import annotations

from flowtrace.model.facts import ProblemKind, Word


class Consequence(Word):
    """The effect of a finding's defect on a served draft, worst first."""

    SILENT_WRONG = "silent_wrong"  # the draft receives other states than trained on; nothing fails
    CRASH_SERVING = "crash_serving"  # a request the engine accepted at start-up raises in a forward
    FRAGILE = "fragile"  # works today; breaks on a convention change or another draft's ids
    REFUSED_STARTUP = "refused_startup"  # the engine says at start-up that it cannot serve this
    UNREACHABLE = "unreachable"  # no registered entry reaches it with ids a draft can send


_SEVERITY: dict[Consequence, str | None] = {
    Consequence.SILENT_WRONG: "error",
    Consequence.CRASH_SERVING: "error",
    Consequence.FRAGILE: "warning",
    Consequence.REFUSED_STARTUP: "info",
    Consequence.UNREACHABLE: None,
}


def severity_of(consequence: Consequence | None) -> str | None:
    """The severity a consequence earns (None: not reported). The only mapping in flowtrace.

    A finding without a consequence is a note about what the engine can capture (or about
    flowtrace itself: an unreadable file, an unused suppression): ``info``."""
    return "info" if consequence is None else _SEVERITY[consequence]


def severity_for(consequence: Consequence | None, kind: ProblemKind | None, declared: str) -> str | None:
    """A finding's severity: its consequence's; without one, ``info`` for a typed problem with no
    consequence (a capability note, a finding about flowtrace itself), else the rule's declared
    severity (a user's rule that reports no typed problem)."""
    if consequence is not None:
        return _SEVERITY[consequence]
    return "info" if kind is not None else declared


def worst(consequences: tuple[Consequence, ...]) -> Consequence:
    """The most serious of several consequences (one finding standing for several causes)."""
    order = tuple(Consequence)
    return min(consequences, key=order.index)


# What each typed problem usually does, read from how the engines behave (a rule states a
# more precise consequence when the chain decides it; this is the fallback, never a second
# severity table). Problems the engine meets at start-up with a raise are refusals: the
# model is not served at all, so no draft is ever served wrong tensors.
DEFAULT_CONSEQUENCE: dict[ProblemKind, Consequence] = {
    ProblemKind.WRAPPER_WITHOUT_SETTER: Consequence.REFUSED_STARTUP,
    ProblemKind.TARGET_METHODS_MISSING: Consequence.REFUSED_STARTUP,
    ProblemKind.CAPTURE_WITHOUT_SETTER: Consequence.REFUSED_STARTUP,
    ProblemKind.CAPTURE_FED_BY_OTHER_FAMILY: Consequence.REFUSED_STARTUP,
    ProblemKind.INTERFACE_HOLDER_CANNOT_CAPTURE: Consequence.REFUSED_STARTUP,
    ProblemKind.FLAG_WITHOUT_CAPTURE: Consequence.REFUSED_STARTUP,
    ProblemKind.DELEGATE_LACKS_SETTER: Consequence.REFUSED_STARTUP,
    ProblemKind.UNGUARDED_LAYER_INDEX: Consequence.REFUSED_STARTUP,
    ProblemKind.METHOD_REFUSED: Consequence.REFUSED_STARTUP,
    ProblemKind.NO_CAPTURE_SITE: Consequence.SILENT_WRONG,
    ProblemKind.IDS_NEVER_SUPPLIED: Consequence.SILENT_WRONG,
    ProblemKind.FLAG_NEVER_SET: Consequence.SILENT_WRONG,
    ProblemKind.RESIDUAL_MISSING: Consequence.SILENT_WRONG,
    ProblemKind.MUTATED_AFTER_CAPTURE: Consequence.SILENT_WRONG,
    ProblemKind.RETURN_DROPPED: Consequence.SILENT_WRONG,
    ProblemKind.CAPTURE_SKIPPED_ON_PATH: Consequence.SILENT_WRONG,
    ProblemKind.FORWARD_DROPS_CAPTURE: Consequence.CRASH_SERVING,
    ProblemKind.INDEX0_RAISES: Consequence.CRASH_SERVING,
    ProblemKind.EMBEDDING_RAISES: Consequence.CRASH_SERVING,
    ProblemKind.PACKER_COUNT_CHECK: Consequence.CRASH_SERVING,
    ProblemKind.TRANSFORM_INCONSISTENT: Consequence.FRAGILE,
    ProblemKind.DEFAULT_BOUNDARIES_SHIFTED: Consequence.FRAGILE,
    ProblemKind.EMBEDDING_ID_DROPPED: Consequence.FRAGILE,
    ProblemKind.CONFIG_READERS_DISAGREE: Consequence.FRAGILE,
    ProblemKind.STALE_LAYER_MARKS: Consequence.FRAGILE,
    ProblemKind.GRAPH_IDS_DIFFER: Consequence.SILENT_WRONG,
    ProblemKind.LAYERS_RUN_WITHOUT_CAPTURE: Consequence.CRASH_SERVING,
    ProblemKind.SETTER_WRITES_UNREAD: Consequence.CRASH_SERVING,
}


def default_consequence(kind: ProblemKind | None) -> Consequence | None:
    """The usual consequence of a problem kind; None for capability notes (a boundary no id
    reaches) and findings about flowtrace itself, which are ``info``."""
    return DEFAULT_CONSEQUENCE.get(kind) if kind is not None else None

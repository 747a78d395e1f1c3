"""What a finding does to a user, and the one place severity follows from it.

A lint is trusted when ``error`` means what users fear: the draft silently receives other
states than it was trained on, or a request the engine accepted at start-up raises while
serving. A model that claims support and dies at start-up on an error that does not say why
is a ``warning`` (``crash_startup``); a loud refusal at start-up is a missing feature (``info``:
unsupported, and how to add it); code that works today but breaks on a convention change is at
most a ``warning``;
code no registered entry reaches with ids a draft can send reports nothing.
"""

from __future__ import annotations

from flowtrace.model.facts import Word


class Consequence(Word):
    """The effect of a finding's defect on a served draft, worst first."""

    SILENT_WRONG = "silent_wrong"  # the draft receives other states than trained on; nothing fails
    CRASH_SERVING = "crash_serving"  # a request the engine accepted at start-up raises in a forward
    # the model claims support and start-up dies on an error that does not say why (an
    # assertion, a TypeError in a dummy run, an unpack of a bare tensor)
    CRASH_STARTUP = "crash_startup"
    FRAGILE = "fragile"  # works today; breaks on a convention change or another draft's ids
    REFUSED_STARTUP = "refused_startup"  # the engine says at start-up that it cannot serve this
    UNREACHABLE = "unreachable"  # no registered entry reaches it with ids a draft can send


SEVERITY: dict[Consequence, str | None] = {
    Consequence.SILENT_WRONG: "error",
    Consequence.CRASH_SERVING: "error",
    Consequence.CRASH_STARTUP: "warning",
    Consequence.FRAGILE: "warning",
    Consequence.REFUSED_STARTUP: "info",
    Consequence.UNREACHABLE: None,
}
"""The severity each consequence earns (None: not reported): the only such table in flowtrace."""


def severity_of(consequence: Consequence | None) -> str | None:
    """The severity a consequence earns (None: not reported). The only mapping in flowtrace.

    A finding without a consequence is a note about what the engine can capture (or about
    flowtrace itself: an unreadable file, an unused suppression): ``info``."""
    return "info" if consequence is None else SEVERITY[consequence]


def worst(consequences: tuple[Consequence, ...]) -> Consequence:
    """The most serious of several consequences (one finding standing for several causes)."""
    order = tuple(Consequence)
    return min(consequences, key=order.index)


def how_severity_follows() -> str:
    """One sentence for every place that shows a rule's severity (docs/rules.md, ``explain``,
    ``--statistics``, the HTML legend): the rule's is its default consequence's, a finding's
    is its own consequence's."""
    by: dict[str, list[str]] = {}
    for consequence, severity in SEVERITY.items():
        by.setdefault(severity or "not reported", []).append(consequence.value)
    parts = "; ".join(f"{', '.join(names)} -> {severity}" for severity, names in by.items())
    return (
        "A rule's severity is its default consequence's; each finding's severity follows its own consequence "
        f"({parts}; no consequence -> info)."
    )

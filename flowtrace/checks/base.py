"""The rule framework: one small class per rule, its metadata and examples beside its logic.

A rule reads the resolved project (facts, model rows) and yields findings. Its metadata is
what ``flowtrace rules`` / ``flowtrace explain`` print and what SARIF's ``rules[]`` carries.
Fingerprints hash the rule, the qualified symbol and a normalised snippet, never the line
number, so a baseline survives unrelated edits above the finding.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Iterable, Iterator, Sequence, TypedDict

from flowtrace.model.consequence import Consequence, severity_of
from flowtrace.model.facts import Location, ProblemKind

if TYPE_CHECKING:
    from flowtrace.analysis.scan import ScanResult

SEVERITIES = ("info", "warning", "error")


class Graded(TypedDict):
    """A finding's consequence and its effect in words, as a rule's grading helper returns them
    for :meth:`Rule.finding` (``**graded``)."""

    consequence: Consequence | None
    effect: str | None


@dataclass(frozen=True, slots=True)
class Finding:
    rule: str
    name: str
    severity: str
    file: str
    line: int
    message: str
    symbol: str | None
    fingerprint: str
    hint: str | None = None
    flow: tuple[Location, ...] = ()  # steps of a capture path, for SARIF codeFlows
    kind: ProblemKind | None = None  # what is wrong, typed (tests and tools match this, never the message)
    flow_labels: tuple[str, ...] = ()  # the link each step of ``flow`` is ("setter", "capture site", ...)
    # What the defect does to a served draft (severity follows from it, flowtrace.model.consequence),
    # said in words ("the draft silently receives b=2 instead of b=3").
    consequence: Consequence | None = None
    effect: str | None = None
    # Further places with the same root cause (per-platform copies, other classes sharing the
    # base): SARIF relatedLocations, "and N more" in text. The finding's own place comes first.
    related: tuple[Location, ...] = ()
    entry_path: str | None = None  # how a draft reaches the defect: "Entry -> Model -> Layer"
    # Other rules' findings merged into this one (same statement, one root cause), each as its
    # rule reported it: the fix stage offers an absorbed rule's codemod and judges it by the
    # absorbed finding's own fingerprint.
    causes: tuple[Finding, ...] = ()
    # The finding stands for its causes (one report at the place to fix, a base class, for the
    # per-class findings of one rule): it has no patch of its own, the fix stage plans the
    # causes', and a baseline that accepted every cause accepts it.
    grouped: bool = False
    # The model rows (qualnames) the finding concerns beside its symbol's: a finding at the place
    # to fix names every class the cause reaches (the report shows it on each of their rows).
    affects: tuple[str, ...] = ()
    # The speculative method it was found under (a profile's [methods.<name>]), when the scan
    # answers for another than the default one or for every method (``--method all``); None: the
    # default method's finding of a plain scan.
    method: str | None = None


def with_causes(findings: Iterable[Finding]) -> list[Finding]:
    """Every finding and every finding merged into one, flattened (the fix stage's view); a
    grouped finding is represented by its causes only."""
    return [g for f in findings for g in ((*f.causes,) if f.grouped else (f, *f.causes))]


def fingerprint(rule: str, symbol: str | None, snippet: str) -> str:
    normalised = " ".join(snippet.split())
    return hashlib.sha256(f"{rule}\0{symbol or ''}\0{normalised}".encode()).hexdigest()[:20]


@dataclass(frozen=True, slots=True)
class Example:
    """A complete module the rule must flag (INVALID) or leave alone (VALID).

    tests/test_rule_examples.py runs every example: it is written to ``models/example.py`` of a
    small engine tree of the named ``profile`` (empty: the harness's default) beside three
    sibling models with the engine's usual conventions, so rules that compare a class with its
    siblings can judge it. An INVALID example pins what it must produce (Fixit's style): the
    ``line`` within ``code``, the problem ``kind`` and a ``message`` fragment; the test fails
    when no finding of the rule matches all three, so an example that fires for another
    reason, or at another place, is caught.
    """

    code: str
    note: str = ""
    profile: str = ""
    line: int = 0  # INVALID: the line of ``code`` (1-based) the finding points at
    kind: ProblemKind | None = None  # INVALID: the finding's typed problem kind
    message: str = ""  # INVALID: a fragment the finding's message contains
    consequence: Consequence | None = None  # INVALID: what the finding does to a served draft
    severity: str = ""  # INVALID: the severity that follows from it


@dataclass(frozen=True, slots=True)
class FixExample:
    """An INVALID module and, written by hand, the source the rule's codemod must turn it into
    (Fixit's ``expected_replacement``). tests/test_fix_examples.py runs each through the whole
    fix pipeline (plan, re-scan, trace check) in the examples' engine tree."""

    code: str
    expected: str
    note: str = ""
    profile: str = ""


class _Default:
    """The ``consequence`` argument left out: the rule's declared default applies."""

    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT = _Default()


class Rule:
    """Subclass, set the metadata, implement :meth:`check`; registration is automatic.

    A rule declares one default ``consequence`` (None: a capability note or a finding about
    flowtrace itself); its ``severity`` is derived from it (:func:`severity_of`) and is never
    declared, so docs, ``explain``, SARIF and the report cannot disagree with the findings. A
    finding's severity differs from the rule's only through its own consequence; the other
    consequences a rule's findings may carry are declared in ``other_consequences``.
    """

    code: ClassVar[str]
    name: ClassVar[str]
    consequence: ClassVar[Consequence | None] = None
    other_consequences: ClassVar[tuple[Consequence | None, ...]] = ()
    severity: ClassVar[str]  # derived from ``consequence`` at class creation; never declared
    summary: ClassVar[str]
    rationale: ClassVar[str]
    fix: ClassVar[str]
    valid: ClassVar[tuple[Example, ...]] = ()
    invalid: ClassVar[tuple[Example, ...]] = ()
    kind: ClassVar[ProblemKind | None] = None  # the rule's usual problem kind; finding(kind=) overrides
    # The rule's codemod as a lazy "module:function" reference (flowtrace.fix imports it, and
    # libcst with it, only when a fix runs), and its INVALID -> fixed examples.
    autofix: ClassVar[str | None] = None
    fix_examples: ClassVar[tuple[FixExample, ...]] = ()

    registry: ClassVar[dict[str, type[Rule]]] = {}

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "severity" in cls.__dict__:
            raise TypeError(
                f"{cls.__name__}: declare `consequence`, not `severity` (a rule's severity is its default"
                " consequence's)"
            )
        cls.severity = severity_of(cls.consequence) or "info"
        if getattr(cls, "code", None):
            if cls.code in Rule.registry:
                raise RuntimeError(f"duplicate rule code {cls.code}")
            Rule.registry[cls.code] = cls

    def check(self, result: ScanResult) -> Iterator[Finding]:
        raise NotImplementedError

    def finding(
        self,
        location: Location,
        message: str,
        symbol: str | None,
        snippet: str,
        flow: tuple[Location, ...] = (),
        kind: ProblemKind | None = None,
        fix: str | None = None,
        steps: Sequence[tuple[str, Location | None]] = (),
        consequence: Consequence | None | _Default = DEFAULT,
        effect: str | None = None,
        affects: Iterable[str] = (),
    ) -> Finding:
        """A finding of this rule; ``fix`` replaces the rule's generic fix when the engine's
        convention gives a more precise one. ``steps`` names the chain's links as
        ``(label, location)`` pairs (missing locations and repeats dropped); it replaces ``flow``.
        ``consequence`` (default: the rule's declared one; None: no consequence, a capability
        note) decides the severity; ``effect`` says it in words for this finding; ``affects``
        names the model rows (qualnames) the finding concerns beside its symbol's."""
        labels: tuple[str, ...] = ()
        if steps:
            kept: dict[Location, str] = {}
            for label, where in steps:
                if where is not None and where not in kept:
                    kept[where] = label
            flow, labels = tuple(kept), tuple(kept.values())
        kind = kind or self.kind
        chosen = self.consequence if isinstance(consequence, _Default) else consequence
        return Finding(
            rule=self.code,
            name=self.name,
            severity=severity_of(chosen) or "info",
            file=location.file,
            line=location.line,
            message=message,
            symbol=symbol,
            fingerprint=fingerprint(self.code, symbol, snippet),
            hint=fix or self.fix,
            flow=flow,
            kind=kind,
            flow_labels=labels,
            consequence=chosen,
            effect=effect,
            affects=tuple(sorted(set(affects) - {symbol})),
        )


@dataclass(frozen=True, slots=True)
class RuleInfo:
    code: str
    name: str
    severity: str
    summary: str
    rationale: str
    fix: str
    valid: tuple[Example, ...] = field(default=())
    invalid: tuple[Example, ...] = field(default=())


def all_rules() -> list[type[Rule]]:
    """Every rule, by code: the package's (imported here, the first time) and any defined elsewhere."""
    from flowtrace.checks import load_rule_modules

    load_rule_modules()  # each rule module registers its rule as it is defined
    return [Rule.registry[c] for c in sorted(Rule.registry)]

"""The capture model: one typed chain of links per model row (docs/architecture.md, The links).

Every row's answer is the composition of the same links, whatever the engine, each found in
the code and carrying the file:line it rests on::

    1 id source    where the ids come from (a draft-config key handed to a setter, a config
                   attribute, a build-context field, the serving config) and whether the
                   draft's ids are read at all                               IdSourceLink
    2 production   how concrete ids are produced: a setter chain run on the draft's ids, a
                   builder's layout evaluated on L, the serving ids sorted   ProductionLink
    3 store        who holds them and what is written (a list attribute, per-layer marks, a
                   config attribute, a context field, serving metadata)      HolderLink
    4 site         the statement of a forward that reads them and records    SiteLink
    5 stream       what is recorded at each index                            StreamLink
    6 slots/return a fixed-slot collector; whether the states reach the runner  SlotsLink, ReturnLink
    7 concat       the order they are read back, and what an id no layer records does  ConcatLink
    8 serving      what the runner does with the model                       ServingLink

:mod:`flowtrace.analysis.chain` assembles one :class:`CaptureChain` per model row
(``ModelRow.chain``; None: the row has no id source at all) from what
:mod:`flowtrace.analysis.resolve` and :mod:`flowtrace.analysis.config_capture` found (link 8
from :mod:`flowtrace.analysis.serving`, once the row's chain is known);
:mod:`flowtrace.analysis.trace` evaluates it on concrete ids (one phase per link, the serving
phase in :mod:`flowtrace.analysis.serving_phase`); :mod:`flowtrace.analysis.graph` stores links
1-7 as typed nodes and edges; compat, the checks and the scan JSON read the links. Links are
frozen and hold strings, ints, enums, locations and (link 8) the runner's step facts, like the
facts. ``docs/architecture.md`` ("The capture model") says how to add a link or a phase.
"""

from __future__ import annotations

from dataclasses import dataclass

from flowtrace.model.facts import (
    ConcatOrder,
    HolderKind,
    LayerRunFact,
    Location,
    Mechanism,
    Outcome,
    Point,
    ProblemKind,
    ReturnKind,
    RunnerIds,
    RunnerStep,
    ServingMode,
    SourceKind,
    StreamKind,
    Transform,
    Word,
)


def compose_transforms(outer: str, inner: str) -> str:
    """The transform of ``inner(outer(ids))``: identity and pure delegation are neutral."""
    if outer in (Transform.IDENTITY, Transform.DELEGATES):
        return inner
    if inner in (Transform.IDENTITY, Transform.DELEGATES):
        return outer
    if Transform.CONDITIONAL in (outer, inner):
        return Transform.CONDITIONAL
    return Transform.OTHER


# Problems that describe how a chain behaves on some ids rather than a chain that cannot work
# (a row with only these is not "broken"; trace decides them on the concrete ids).
NOT_BREAKING = frozenset({ProblemKind.INDEX0_RAISES, ProblemKind.PACKER_COUNT_CHECK, ProblemKind.DEPENDS_ON_CONFIG})


class Production(Word):
    """Link 2: how the concrete ids the capture site meets are produced (the tracer's id
    phase dispatches on it)."""

    SETTER_CHAIN = "setter_chain"  # the draft's ids run through the setters (the transform links)
    BUILDER_LAYOUT = "builder_layout"  # a builder or build-context feed writes a layout evaluated on L
    SERVING_IDS = "serving_ids"  # the serving config's ids, sorted; a metadata class's default when none is given


class StoreKind(Word):
    """Link 3: what the ids are written into, where the site reads them."""

    ATTRIBUTE = "attribute"  # a list/set attribute on the holder (self.layers_to_capture)
    LAYER_MARKS = "layer_marks"  # a flag set on each chosen layer, read back per layer by the site
    CONFIG_ATTRIBUTE = "config_attribute"  # a config attribute the holder copies in __init__
    CONTEXT_FIELD = "context_field"  # a build-context field the holder copies in __init__
    METADATA = "metadata"  # the serving metadata's id set, read by a hook the layers call


class Unmatched(Word):
    """Link 7: what an id that no layer records does when the states are read back."""

    DROPPED = "dropped"  # the loop never meets it: no state, no slot
    RAISES = "raises"  # read back by key from a dict keyed by layer: KeyError
    EMPTY_SLOT = "empty_slot"  # a slot of a preallocated buffer no layer writes: read uninitialised


@dataclass(frozen=True, slots=True)
class Problem:
    """A typed problem on a chain: rules select on ``kind``; ``text`` is for people."""

    kind: ProblemKind
    text: str
    location: Location | None = None

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class Decision:
    """An outcome the links decide without concrete ids, and why: a builder's method gate
    refuses, no builder fills the ids, no layer calls the hook, or the engine writes them."""

    outcome: Outcome
    reason: str
    location: Location | None


# -- link 1 -------------------------------------------------------------------------------

_SOURCE_WORDS = {
    SourceKind.SETTER: "setter",
    SourceKind.CONFIG_ATTRIBUTE: "config",
    SourceKind.BUILD_CONTEXT: "context",
    SourceKind.SERVING_CONFIG: "hook",
    SourceKind.NONE: "none",
}


@dataclass(frozen=True, slots=True)
class IdSourceLink:
    kind: SourceKind
    key: str | None  # the draft/serving-config key, config attribute or context name
    location: Location | None  # where the engine reads it (setter entry for SETTER)

    @property
    def reads_draft_ids(self) -> bool:
        """Only a setter is handed the draft's ids; every other source fills them itself or
        takes its serving config's."""
        return self.kind is SourceKind.SETTER

    @property
    def word(self) -> str:
        """The id source's kind as outputs name it (``setter``, ``config``, ``context``, ``hook``)."""
        return _SOURCE_WORDS[self.kind]


# -- link 2 -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TransformLink:
    """One setter of the chain (or the builder that writes a layout): what it does to the ids
    it receives."""

    owner: str  # qualified class the setter is defined on
    method: str
    acts_on: str  # qualified class of the object it runs on
    transform: Transform
    note: str | None
    default: str | None  # default-ids expression it uses when given None
    location: Location


@dataclass(frozen=True, slots=True)
class LayoutLink:
    """BUILDER_LAYOUT: the layout the engine writes itself (``key = expression`` under
    ``condition``, after the local ``bindings``), evaluated on L."""

    key: str
    expression: str
    condition: str  # the enclosing tests, "" when unconditional
    bindings: tuple[tuple[str, str], ...]  # locals assigned before it (name, expression)
    location: Location
    builder: str | None  # qualified builder class; None: a build-context feed


@dataclass(frozen=True, slots=True)
class DefaultLink:
    """SERVING_IDS: the method that writes the metadata's ids when the serving config names
    none (run by the evaluator on L)."""

    owner: str  # qualified class
    method: str
    attribute: str
    source: str
    location: Location


@dataclass(frozen=True, slots=True)
class ProductionLink:
    """Link 2. ``transforms``: the setters followed, outermost first (SETTER_CHAIN), or the
    builder as one ``ignored`` transform (BUILDER_LAYOUT); ``decision``: the outcome the id
    source's resolution states without ids (sources other than a setter always state one)."""

    kind: Production
    transforms: tuple[TransformLink, ...] = ()
    layout: LayoutLink | None = None
    default: DefaultLink | None = None
    decision: Decision | None = None

    @property
    def id_transform(self) -> str:
        """What the row's ``id_transform`` says: the entry setter's transform, ``ignored`` (the
        engine's own layout) or ``serving_config`` (the engine's serving ids)."""
        if self.kind is Production.BUILDER_LAYOUT:
            return Transform.IGNORED
        if self.kind is Production.SERVING_IDS:
            return SourceKind.SERVING_CONFIG
        return self.transforms[0].transform if self.transforms else Transform.IDENTITY


# -- link 3 -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HolderLink:
    """The class whose attribute holds the capture indices, how it is built, and what is written."""

    holder: str | None  # qualified class; None when it depends on the target config
    kind: HolderKind
    attribute: str | None  # the capture attribute it holds
    location: Location | None  # the construction (or the class) that decides it
    depends_on: str | None = None  # config key for DYNAMIC holders, e.g. "text_config.architectures"
    store: StoreKind = StoreKind.ATTRIBUTE


# -- link 4 -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FirstIteration:
    """A setter-less site's first-iteration raise: index ``index`` is met while ``operand``
    is still None and is added unguarded (TypeError at ``at``). Setter rows state the same
    fact in their stream link; setter-less rows carry no stream link yet (their scan JSON
    says ``stream: null``), so the trace reads it here."""

    index: int
    operand: str
    at: Location


@dataclass(frozen=True, slots=True)
class SiteLink:
    mechanism: Mechanism
    point: Point
    function: str
    location: Location
    note: str
    evidence: tuple[Location, ...] = ()  # steps followed (layer forward, helper, hook)
    attribute: str | None = None  # the capture attribute the membership test reads
    loop_variable: str | None = None
    loop_range: str | None = None  # source of the iterated range
    container: str | None = None  # the aux container variable
    embedding_capturable: bool | None = None  # b=0 is recorded (decided with the point)
    last_layer_capturable: bool | None = None  # b=L is recorded (output point or post-loop)
    owner: str | None = None  # qualified class whose method holds the site
    captured_expression: str | None = None  # what is recorded, e.g. "hidden_states + residual"
    first_iteration: FirstIteration | None = None


# -- links 5-6 ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StreamLink:
    """What the site records; ``raising_index`` names the first-iteration raise if any."""

    kind: StreamKind
    expression: str | None
    raising_index: int | None  # the capture index whose recording raises (None: none raises)
    raises_at: Location | None
    reason: str | None
    # MUTATED_REFERENCE: the in-place update of the stored tensor and where it is; when the
    # loop never rebinds the name, every recorded slot is one tensor holding the loop's final state.
    mutation: str | None = None
    mutated_at: Location | None = None
    final_state: bool = False


@dataclass(frozen=True, slots=True)
class SlotsLink:
    """A fixed-slot collector sized by the number of capture indices and checked later."""

    collector: str  # qualified class
    sized_by: str
    check: str | None  # the raising condition, e.g. "self._idx != self._num_captures"
    check_at: Location | None
    finalize_at: Location | None
    empty_return_at: Location | None = None  # an empty collector is returned before finalizing


@dataclass(frozen=True, slots=True)
class ReturnLink:
    """Whether the captured states reach the runner. ``location`` is the statement that decides
    it (the dropping return, the raising unpacking, the use that hands them on); ``raises``:
    Python raises there; ``decided``: False when it depends on something only a run shows
    (an early return under a batch test), so the trace only notes it."""

    kind: ReturnKind
    location: Location | None
    reason: str | None = None
    raises: bool = False
    decided: bool = True
    evidence: tuple[Location, ...] = ()  # the flag's value, the inner forward's return, ...
    flag: str | None = None  # the ``self.<flag>`` the decision turns on, if any


# -- link 7 -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConcatLink:
    order: ConcatOrder
    last_layer_at: Location | None  # a post-loop capture of b=L, if any
    location: Location | None  # the concatenation the states reach (what trace cites)
    candidates: tuple[Location, ...] = ()  # every concatenation they may reach (site module, draft modules)
    unmatched: Unmatched = Unmatched.DROPPED
    post_norm_ids: tuple[int, ...] = ()  # ids read back as the post-final-norm state: a slot, no boundary
    post_norm_at: Location | None = None  # where that state is recorded


# -- link 8: the serving path ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SetterCall:
    """One setter call the runner makes on a way through its start-up (read by
    :mod:`flowtrace.analysis.serving`): the step, the runner function holding it (qualified) and
    the phase it runs in (start-up, warm-up, graph capture, weight reload)."""

    step: RunnerStep
    function: str
    phase: str

    @property
    def default(self) -> bool:
        return self.step.ids == RunnerIds.DEFAULT

    def words(self) -> str:
        where = self.function.rsplit(".", 2)
        owner = ".".join(where[-2:]) if len(where) >= 2 else self.function
        ids = "no ids (the model's defaults)" if self.default else f"`{self.step.ids_text}`"
        return f"{owner} calls {self.step.name}() with {ids} ({self.step.location}, {self.phase})"


@dataclass(frozen=True, slots=True)
class PhaseLink:
    """What one kind of batch is served with: the setter calls whose ids the model holds then
    (the last one, or every one when marks accumulate), or none at all (a graph captured before
    any call replays the model's initial, empty capture list)."""

    name: str  # "prefill" | "graph replay" | "after a weight reload"
    words: str  # for people: "prefill (eager)", "decode and target-verify batches (graph replay)"
    calls: tuple[SetterCall, ...]
    at: Location | None  # the capture (graph replay), or the last call


@dataclass(frozen=True, slots=True)
class ForwardPathLink:
    """A call in the row's capturing forward that runs decoder layers itself: another path for
    those layers (:mod:`flowtrace.analysis.forward_paths`). ``records``: it is handed the
    collector (it may record); ``reads``: the store the forward's capture reads (an attribute
    or a per-layer mark); ``words``: the batches that take it, in words (the profile's name
    for the batch flag, else the call's condition; None: the engine never runs them while a
    draft is served); ``how``/``raises_at``: what happens on those batches when the path
    does not record."""

    run: LayerRunFact
    records: bool
    reads: str | None
    site_at: Location
    words: str | None
    how: str = ""
    raises_at: Location | None = None

    @property
    def skips_capture(self) -> bool:
        """Batches served with a draft take this path and its layers are not recorded."""
        return not self.records and self.words is not None

    def batches(self) -> str:
        return f"{self.words} batches"


@dataclass(frozen=True, slots=True)
class UnreadLink:
    """The setter chain writes ``writes``; the capturing forward decides by ``reads`` only
    (:mod:`flowtrace.analysis.attribute_flow`): the forward never records."""

    setter_owner: str  # qualified class of the setter that writes (the chain's last one that writes)
    setter_method: str
    setter_at: Location
    writes: tuple[str, ...]
    reads: tuple[str, ...]
    function: str  # the capturing forward
    site_at: Location

    def words(self) -> str:
        return (
            f"{self.setter_owner.rsplit('.', 1)[-1]}.{self.setter_method} writes {', '.join(self.writes)}, but "
            f"{self.function} decides by {', '.join(self.reads)} ({self.site_at}), which nothing it runs sets"
        )


@dataclass(frozen=True, slots=True)
class ServingLink:
    """Link 8, what the engine's runner does with the model, resolved once per row with its
    chain: ``modes``, the serving paths a serving-config hook row can capture on; ``phases``,
    the setter calls whose ids each phase of serving holds (prefill, graph replay, after a
    weight reload; empty when the runner's start-up was not read); ``paths``, the layer-running
    calls of the capturing forward, and whether each records; ``unread``, what the setters
    write against what the forward reads, when they differ. The tracer's serving phase
    (:mod:`flowtrace.analysis.serving_phase`) traces the phases and paths on concrete ids."""

    modes: tuple[ServingMode, ...] = ()
    phases: tuple[PhaseLink, ...] = ()
    paths: tuple[ForwardPathLink, ...] = ()
    unread: UnreadLink | None = None

    @property
    def skipping(self) -> tuple[ForwardPathLink, ...]:
        """The paths some batches served with a draft take without the capture."""
        return tuple(p for p in self.paths if p.skips_capture)


NO_SERVING = ServingLink()


# -- the chain ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CaptureChain:
    """All links of one model class, outermost first. ``method``: the speculative method this
    chain answers for, as a profile names it (None: the profile's EAGLE-3 method; a row's
    chains for further methods go beside this one, see docs/architecture.md)."""

    source: IdSourceLink
    production: ProductionLink
    holder: HolderLink | None
    site: SiteLink | None
    stream: StreamLink | None
    slots: SlotsLink | None
    returns: ReturnLink | None
    concat: ConcatLink | None
    problems: tuple[Problem, ...] = ()
    serving: ServingLink = NO_SERVING
    method: str | None = None

    @property
    def transforms(self) -> tuple[TransformLink, ...]:
        """Link 2's transform links (the setters followed, or a builder's ``ignored``)."""
        return self.production.transforms

    @property
    def setter_driven(self) -> bool:
        """The draft's ids reach an entry setter (link 1 is a setter)."""
        return self.source.kind is SourceKind.SETTER

    @property
    def effective_transform(self) -> str:
        """What the whole transform chain does to the ids (link 2 composed, outermost first)."""
        transforms = self.production.transforms
        if not transforms:
            return Transform.IDENTITY
        out: str = transforms[0].transform
        for link in transforms[1:]:
            out = compose_transforms(out, link.transform)
        return out

    def kinds(self) -> set[ProblemKind]:
        """The typed problems on the chain: what rules select on (never the texts)."""
        return {p.kind for p in self.problems}

    def has(self, kind: ProblemKind) -> bool:
        return any(p.kind is kind for p in self.problems)


__all__ = [
    "NO_SERVING",
    "NOT_BREAKING",
    "CaptureChain",
    "ConcatLink",
    "Decision",
    "DefaultLink",
    "FirstIteration",
    "ForwardPathLink",
    "HolderLink",
    "IdSourceLink",
    "LayoutLink",
    "PhaseLink",
    "Problem",
    "Production",
    "ProductionLink",
    "ReturnLink",
    "ServingLink",
    "SetterCall",
    "SiteLink",
    "SlotsLink",
    "StoreKind",
    "StreamLink",
    "TransformLink",
    "Unmatched",
    "UnreadLink",
    "compose_transforms",
]

"""The frozen records every stage of the pipeline passes on.

Facts are plain, slotted, frozen dataclasses holding strings, ints and tuples only: they
cross process boundaries (the parse pool), go into the on-disk cache (pickled) and are
compared in tests. No syntax node ever leaves the analyser that found it.

Locations are POSIX paths relative to the scanned root, with 1-based lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

class Word(str, Enum):
    """A status word: an enum member that compares, formats and serialises (JSON, pickle
    by value) as its plain string, so ``flowtrace.scan/1`` and ``.trace/1`` keep the same
    strings while code names the words once, here."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class Transform(Word):
    """How a setter maps the draft's config ids to capture indices."""

    PLUS_ONE = "plus_one"
    IDENTITY = "identity"
    CONDITIONAL = "conditional"
    DELEGATES = "delegates"
    IGNORED = "ignored"  # the engine uses its own ids whatever the draft says
    OTHER = "other"


class Point(Word):
    """Capture point, relative to an index i held in the capture attribute."""

    INPUT = "input"  # index i yields boundary i (the input of layer i)
    OUTPUT = "output"  # index i yields boundary i + 1 (the output of layer i)
    UNKNOWN = "unknown"


class Mechanism(Word):
    """How a capture site records a state."""

    APPEND = "append"  # aux.append(...) inside the layer loop
    CALLBACK = "callback"  # a callback or collector handed to layer i
    PACKER = "packer"  # a packer object handed to layer i or appended to
    HELPER = "helper"  # self._maybe_add_hidden_state(aux, label, h, r)
    DICT = "dict"  # by_layer[i] = h inside the loop
    DICT_STORE = "dict_store"  # setter-less: by_layer[idx] = out[k] under a flag handed to the layer
    # a metadata hook the decoder layer calls itself (setter-less, or an object built from the capture attribute)
    HOOK = "hook"
    BUFFER = "buffer"  # buf[k].copy_(h + r) / buf[:, a:b] = h: a slice of a preallocated buffer written in the loop
    FLAGGED = "flagged"  # h, r, prev = layer(..., kw=i in ids); if prev is not None: aux.append(prev)
    UNKNOWN = "unknown"  # no site, or a spelling no mechanism names


class Support(Word):
    """A model row's capture support."""

    SUPPORTED = "supported"
    INHERITED = "inherited"
    DELEGATED = "delegated"
    CONDITIONAL = "conditional"  # depends on the target config (a holder built from it)
    BROKEN = "broken"
    NONE = "none"


class Outcome(Word):
    """What a trace on concrete ids ends in."""

    CAPTURES = "captures"
    RAISES = "raises"
    CAPTURES_NOTHING = "captures_nothing"
    UNKNOWN = "unknown"  # a link could not be decided (the reason says which)
    REFUSES = "refuses"  # the engine refuses the speculative method for this model (a config builder's gate)
    # Every id is recorded, but some slots hold a layer's output without the residual its layers
    # return apart (a delta stream): states, not residual-stream boundaries (``TraceResult.slots``).
    CAPTURES_DELTAS = "captures_deltas"


class StreamKind(Word):
    """What a capture site records, relative to the residual stream at its boundary."""

    RESIDUAL_STREAM = "residual_stream"
    DELTA = "delta"  # the layer output without the residual it returns separately
    MUTATED_REFERENCE = "mutated_reference"  # a reference the loop later updates in place
    UNKNOWN = "unknown"


class SourceKind(Word):
    """Where the ids a model captures come from (link 1 of the chain)."""

    SETTER = "setter"  # a draft-config key the runner hands to an entry setter
    SERVING_CONFIG = "serving_config"
    CONFIG_ATTRIBUTE = "config_attribute"
    BUILD_CONTEXT = "build_context"
    NONE = "none"  # the engine uses its own default (transform ignored)


class HolderKind(Word):
    """How the object holding the capture attribute is constructed (link 3)."""

    SELF = "self"
    DIRECT = "direct"  # self.model = Cls(...)
    CLASS_ATTRIBUTE = "class_attribute"  # model_cls = Cls; self.model_cls(...)
    PARAMETER_DEFAULT = "parameter_default"  # def __init__(..., language_model_cls=Cls)
    FACTORY_OVERRIDE = "factory_override"  # self.model = self._init_model(...) overridden by a subclass
    REGISTRY_FACTORY = "registry_factory"  # a factory handed an architecture name
    DYNAMIC = "dynamic"  # built from the target config at run time


class ReturnKind(Word):
    """Whether the captured states reach the runner (link 6)."""

    RETURNED = "returned"
    EARLY_RETURN = "early_return"  # the inner forward returns without them first
    OVERRIDDEN = "overridden"  # the inner model's forward overrides the capturing one and returns one value
    FLAG_NEVER_SET = "flag_never_set"  # the wrapper hands them on only under a flag the setter never sets
    NOT_UNPACKED = "not_unpacked"  # the wrapper keeps only the first element of the inner output
    BARE_OUTPUT = "bare_output"  # the wrapper unpacks (hidden, aux) from an inner forward that returns one value


class ConcatOrder(Word):
    """Order of the captured states at the concat (link 7)."""

    LOOP = "loop"  # the order the layer loop meets the indices (sorted boundaries)
    CONFIG = "config"  # the order the ids were given
    SORTED = "sorted"  # ascending ids, one preallocated buffer slot each (hook engines)


class ProblemKind(Word):
    """Typed problems on a capture chain; rules select on these, never on message text."""

    SETTER_WRITES_NOTHING = "setter_writes_nothing"
    DELEGATE_UNRESOLVED = "delegate_unresolved"
    DELEGATE_LACKS_SETTER = "delegate_lacks_setter"
    SUPER_UNRESOLVED = "super_unresolved"
    HOLDER_UNRESOLVED = "holder_unresolved"
    NO_CAPTURE_SITE = "no_capture_site"
    POINT_UNKNOWN = "point_unknown"
    INDEX0_RAISES = "index0_raises"
    PACKER_COUNT_CHECK = "packer_count_check"
    RETURN_DROPPED = "return_dropped"
    DEPENDS_ON_CONFIG = "depends_on_config"
    # What a finding of the checks says is wrong (flowtrace.checks; stable values: baselines and
    # SARIF properties.problem carry them). Chain problems above are reused where they fit.
    WRAPPER_WITHOUT_SETTER = "wrapper_without_setter"
    TARGET_METHODS_MISSING = "target_methods_missing"
    CAPTURE_WITHOUT_SETTER = "capture_without_setter"
    CAPTURE_FED_BY_OTHER_FAMILY = "capture_fed_by_other_family"
    INTERFACE_HOLDER_CANNOT_CAPTURE = "interface_holder_cannot_capture"
    FLAG_WITHOUT_CAPTURE = "flag_without_capture"
    FORWARD_DROPS_CAPTURE = "forward_drops_capture"
    CAPTURE_SKIPPED_ON_PATH = "capture_skipped_on_path"
    RESIDUAL_MISSING = "residual_missing"
    MUTATED_AFTER_CAPTURE = "mutated_after_capture"
    FLAG_NEVER_SET = "flag_never_set"
    TRANSFORM_INCONSISTENT = "transform_inconsistent"
    DEFAULT_BOUNDARIES_SHIFTED = "default_boundaries_shifted"
    EMBEDDING_ID_DROPPED = "embedding_id_dropped"
    EMBEDDING_UNREACHABLE = "embedding_unreachable"
    EMBEDDING_RAISES = "embedding_raises"
    LAST_LAYER_UNREACHABLE = "last_layer_unreachable"
    UNGUARDED_LAYER_INDEX = "unguarded_layer_index"
    CONFIG_READERS_DISAGREE = "config_readers_disagree"
    UNREADABLE_FILE = "unreadable_file"
    REGISTRY_TARGET_MISSING = "registry_target_missing"
    # A setter-less id source (config attribute, build-context field) that EAGLE-3 never fills:
    # the engine's config builder refuses the method at start-up, or nothing writes the ids and
    # the model captures nothing.
    METHOD_REFUSED = "method_refused"
    IDS_NEVER_SUPPLIED = "ids_never_supplied"
    UNUSED_SUPPRESSION = "unused_suppression"
    STALE_LAYER_MARKS = "stale_layer_marks"
    # The serving path (the runner around the model, flowtrace.analysis.serving):
    GRAPH_IDS_DIFFER = "graph_ids_differ"  # graphs captured while the model held other ids than the draft's
    LAYERS_RUN_WITHOUT_CAPTURE = "layers_run_without_capture"  # a batch path runs layers without the capture
    SETTER_WRITES_UNREAD = "setter_writes_unread"  # the setter writes what the capturing forward never reads
    # a draft class sizes its fc for a literal number of states some drafts do not have
    DRAFT_FC_FIXED_COUNT = "draft_fc_fixed_count"


class DefaultArm(Word):
    """A setter arm that writes the default ids instead of the draft's (no transform of them)."""

    DEFAULT = "default"


class RegistryKind(Word):
    """How an architecture is registered."""

    ENTRY_CLASS = "entry_class"  # a module's ``EntryClass = X`` value
    REGISTRY_DICT = "registry_dict"  # an entry of an architecture dict
    DECORATOR = "decorator"  # ``@register_x("Arch")`` on the class


class UseKind(Word):
    """A method's use of a capture attribute or flag."""

    READ = "read"
    WRITE = "write"


class LayerSide(Word):
    """Where a layer forward uses a parameter, relative to its sub-module calls."""

    BEFORE = "before"  # before the first sub-module call
    AFTER = "after"  # after the last one
    MIDDLE = "middle"


class StreamFactKind(Word):
    """What a :class:`StreamFact` observes."""

    FOLDS_RESIDUAL = "folds_residual"  # a layer forward returns the stream with the residual added
    EARLY_RETURN = "early_return"  # a return drops the aux container
    SELF_CALLS = "self_calls"  # the methods a method calls on self (detail: comma-separated)


class OutputUseKind(Word):
    """How a forward handles its inner model's output."""

    UNPACK = "unpack"  # ``h, aux = out``
    PASS = "pass"  # returned as it is
    DROP = "drop"  # ``return out[0]``
    CONSUME = "consume"  # ``out = self.model(...); return self.head(x, out)``: handed on as one value


class ReturnShape(Word):
    """The shape of what a forward returns."""

    TUPLE = "tuple"
    SINGLE = "single"  # a name only bound as a parameter or one element of an unpacking
    OTHER = "other"


class IdSourceKind(Word):
    """Where a model's ``__init__`` reads its capture ids from, when no setter writes them."""

    CONFIG = "config"  # a config attribute
    CONTEXT = "context"  # a build-context field
    HOOK = "hook"  # the serving config's ids, through a metadata hook the decoder layers call


class ServingMode(Word):
    """A hook engine's serving path a model can capture on."""

    ONE_MODEL = "one_model"  # the draft built beside the target (the model subclasses the opt-in base)
    TWO_MODEL = "two_model"  # the draft a separate model; the target's layers call the hook


class DiagnosticKind(Word):
    """What kept the index from reading or deciding a file (``Diagnostic.kind``)."""

    PARSE_ERROR = "parse-error"
    UNREADABLE = "unreadable"
    TOO_LARGE = "too-large"
    TIMEOUT = "timeout"
    SKIPPED = "skipped"
    UNRESOLVED = "unresolved"
    INTERNAL = "internal"  # an analyser bug on one file (the scan goes on)


class SelectorKind(Word):
    """What a config builder's selector tests."""

    ARCHITECTURES = "architectures"
    MODEL_TYPE = "model_type"
    ALWAYS = "always"
    OTHER = "other"


# Module-level aliases: older code and profiles name the words as constants.
PLUS_ONE, IDENTITY, CONDITIONAL, DELEGATES, IGNORED, OTHER = (
    Transform.PLUS_ONE,
    Transform.IDENTITY,
    Transform.CONDITIONAL,
    Transform.DELEGATES,
    Transform.IGNORED,
    Transform.OTHER,
)
TRANSFORMS = tuple(Transform)
INPUT, OUTPUT, UNKNOWN = Point.INPUT, Point.OUTPUT, Point.UNKNOWN
APPEND, CALLBACK, PACKER, HELPER = Mechanism.APPEND, Mechanism.CALLBACK, Mechanism.PACKER, Mechanism.HELPER


@dataclass(frozen=True, slots=True)
class Location:
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True, slots=True)
class ImportFact:
    """``local`` is the name bound in the module; ``qualified`` what it refers to."""

    local: str
    qualified: str


@dataclass(frozen=True, slots=True)
class Branch:
    """A test a package ``__init__``'s import runs under: the test's source text, and whether
    it holds there (False: the import is in that test's ``else``)."""

    test: str
    holds: bool


@dataclass(frozen=True, slots=True)
class PackageImport:
    """One name a package ``__init__`` imports when it runs (``from <module> import <name> as
    <local>``), in whichever branch: per-platform copies are picked this way
    (``if platform.is_a(): from .vendor_a.model import X``), and a registry entry naming the
    package loads what it binds. ``module`` is written without its leading dots (``level`` of
    them); ``qualified`` is the absolute ``module.name``; ``branches`` are the tests around it
    (none decided at run time: ``TYPE_CHECKING`` blocks never run and are left out);
    ``function`` is the module-level function it runs in (a PEP 562 ``__getattr__``), else "".
    """

    module: str
    level: int
    name: str
    local: str
    qualified: str
    branches: tuple[Branch, ...]
    line: int
    function: str = ""


@dataclass(frozen=True, slots=True)
class PackageFacts:
    """The imports of one package ``__init__.py`` (see :class:`PackageImport`)."""

    path: str
    module: str
    imports: tuple[PackageImport, ...]


@dataclass(frozen=True, slots=True)
class AttributeAssignment:
    """``self.<attribute> = <Callee>(...)`` in a class's ``__init__`` (or a class-level value).

    ``callee`` is resolved through the module's imports when possible (a qualified name),
    else the raw source text. Delegation and holder resolution read these.
    """

    attribute: str
    callee: str
    line: int
    # How the class is chosen, when a subclass may change it: "method:<m>" (built by
    # ``self.<m>()``, which a subclass may override), "param:<name>#<position>" (an
    # ``__init__`` parameter default a subclass may pass through ``super().__init__``) or
    # "attr:<name>" (built by ``self.<name>(...)`` from a class attribute a subclass may set).
    via: str | None = None


@dataclass(frozen=True, slots=True)
class ClassFact:
    name: str
    qualname: str  # module-qualified, e.g. "sglang.srt.models.llama.LlamaForCausalLM"
    location: Location
    bases: tuple[str, ...]  # resolved qualified names where the import table allows
    methods: tuple[str, ...]
    assignments: tuple[AttributeAssignment, ...] = ()
    raise_checks: tuple[RaiseCheck, ...] = ()  # `if <condition>: raise` in a method
    factories: tuple[AttributeAssignment, ...] = ()  # method -> the class it returns (`return Cls(...)`)
    super_args: tuple[AttributeAssignment, ...] = ()  # `super().__init__(..., k=Cls)`: "k" or "#<pos>" -> Cls
    extends: tuple[str, ...] = ()  # methods that call the base's own version (`super().forward(...)`)
    # Class-body `name = Cls` (`model_cls = FooModel`): what `self.name(...)` builds, and what a
    # subclass overriding only that attribute makes its base's `__init__` build instead.
    class_values: tuple[AttributeAssignment, ...] = ()
    # (method, line of its ``def``): where a finding can name a method the class defines, e.g.
    # the forward that never captures, rather than the class line.
    method_lines: tuple[tuple[str, int], ...] = ()

    def method_location(self, method: str) -> Location | None:
        """Where this class defines ``method`` (None when it does not, or for facts without lines)."""
        line = dict(self.method_lines).get(method)
        return Location(self.location.file, line) if line is not None else None


@dataclass(frozen=True, slots=True)
class RaiseCheck:
    """A method that raises under a condition (a packer's count check in ``finalize``)."""

    method: str
    condition: str
    location: Location


class EntryGuard(Word):
    """What a runner does, at one call of the entry setter, with a model that lacks it."""

    NONE = "none"  # the call is unguarded: AttributeError at the call
    RAISES = "raises"  # a check before the call raises (``if not hasattr(m, s): raise``)
    SKIPS = "skips"  # the call is skipped or only warned about: nothing is captured


@dataclass(frozen=True, slots=True)
class EntryCallFact:
    """A call of an entry setter outside every setter: the engine's runner handing the draft's
    ids to the model (``self.model.set_x(ids)``), with the check that guards it, if any.

    ``requires`` is what the check tests, ``method:<name>`` (``hasattr``), ``interface:<name>``
    (``isinstance``) or ``predicate:<function>`` (``supports_x(model)``, resolved against
    :class:`InterfacePredicate`); empty when unguarded. ``raises_at`` is where a model that
    fails it raises: the guard's raise statement, or the call itself when unguarded."""

    function: str
    method: str
    location: Location
    guard: EntryGuard
    requires: str = ""
    condition: str = ""
    raises_at: Location | None = None


class RunnerStepKind(Word):
    """What one step of a runner function does (:class:`RunnerStep`)."""

    SETTER = "setter"  # the runner calls an entry setter on the model
    CAPTURE = "capture"  # a call that captures device graphs (profile ``[serving] graph_capture``)
    WARMUP = "warmup"  # a call that runs dummy forwards at start-up (``[serving] warmup``)
    CALL = "call"  # a call of another function the analysis may follow
    BUILD = "build"  # a class named here (built, or picked to be built)
    RETURN = "return"  # the function returns here on this arm


class RunnerIds(Word):
    """Which ids a runner's setter call hands the model."""

    DEFAULT = "default"  # none (or None): the setter's own default ids
    GIVEN = "given"  # the ids the runner holds, as written (the draft's)
    TRANSFORMED = "transformed"  # the runner changes them first (``[i + 1 for i in ids]``)
    LITERAL = "literal"  # ids written in the runner (a list of numbers)


@dataclass(frozen=True, slots=True)
class RunnerStep:
    """One step of a runner function, in statement order (see :mod:`flowtrace.index.runner_steps`).

    ``name``: the setter, the callee or the class named; ``target``: where a call goes as
    written (``self`` for a method of the same object, a qualified name resolved through the
    imports, or "" for a name the module does not import); ``receiver``: a setter call's
    object as written (``self.model_runner.model``); ``ids``/``ids_text``/``offset``: what a
    setter call hands over (``offset`` k for ``[i + k for i in ids]``); ``repeated``: the step
    sits in a loop."""

    kind: RunnerStepKind
    name: str
    location: Location
    target: str = ""
    receiver: str = ""
    ids: RunnerIds | None = None
    ids_text: str = ""
    offset: int | None = None
    repeated: bool = False


@dataclass(frozen=True, slots=True)
class RunnerFork:
    """An ``if`` (or ``try``) around steps: each arm is one way through it; an ``if`` without
    ``else`` has an empty second arm."""

    location: Location
    condition: str
    arms: tuple[tuple[RunnerStep | RunnerFork, ...], ...]


@dataclass(frozen=True, slots=True)
class RunnerFunctionFact:
    """A function of the engine's runner that hands ids to the model, captures graphs, warms
    up, or leads to one of those: its steps in statement order, forks kept."""

    qualname: str  # module-qualified: "pkg.runner.ModelRunner.initialize"
    class_qualname: str | None
    name: str
    location: Location
    steps: tuple[RunnerStep | RunnerFork, ...]


@dataclass(frozen=True, slots=True)
class LayerRunFact:
    """A call in a capturing forward that runs decoder layers itself (it is handed the layer
    list or a slice of it, ``model_forward_x(layers=self.layers[a:b], ...)``): another path
    for those layers. ``hands_capture``: it is also handed the aux container or the capture
    attribute (it may record); ``condition``: the tests the call runs under; ``flags``: the
    attribute names those tests read, and the tests that decide the names they read."""

    class_qualname: str
    function: str
    location: Location
    callee: str
    layers: str  # the layer expression handed over, e.g. "self.layers[normal_end_layer:self.end_layer]"
    whole: bool  # every layer (no slice)
    hands_capture: bool
    condition: str
    flags: tuple[str, ...]
    off_while: tuple[str, ...] = ()  # ``self`` attributes the call's tests need falsy (``and not self.x``)


@dataclass(frozen=True, slots=True)
class InterfacePredicate:
    """A module-level ``def f(model): return isinstance(model, Interface)``: a runner's
    ``if not f(model): raise`` is an interface check."""

    name: str
    interface: str
    location: Location


@dataclass(frozen=True, slots=True)
class RegistryFact:
    """One registration: an ``EntryClass`` value or an architecture-dict entry."""

    architecture: str  # the architecture string, or the class name for EntryClass
    target: str  # qualified class name
    location: Location
    kind: RegistryKind
    group: str = ""  # the registry dict's name, for registry_dict entries


@dataclass(frozen=True, slots=True)
class SetterBranch:
    """One assignment (or delegation call) a setter performs, under a textual condition."""

    condition: str | None  # conjunction of the enclosing if-tests, "not (...)" for else arms
    target: str  # e.g. "self.model.layers_to_capture" or "self.language_model.set_eagle3_layers_to_capture()"
    expression: str  # the assigned value or the call's first argument
    # transform of this arm alone, or ``default`` for an arm that writes the default ids
    transform: Transform | DefaultArm
    line: int


@dataclass(frozen=True, slots=True)
class SetterFact:
    class_qualname: str
    method: str
    location: Location
    parameter: str | None  # name of the ids parameter
    id_transform: Transform
    transform_note: str | None
    default_layers: str | None  # source text of the default-ids expression
    writes: tuple[str, ...]  # attribute targets written with ids (source text)
    delegate: str | None  # e.g. "self.language_model" when ids go to another object's setter
    delegate_method: str | None
    pp_guard: bool  # returns early on non-last pipeline ranks
    branches: tuple[SetterBranch, ...]
    source: str  # the whole method, for the evaluator
    marks: tuple[LayerMarkFact, ...] = ()  # flags set on the layers it picks (stale unless cleared)
    switches: tuple[str, ...] = ()  # attributes it sets to True (``self.model.dflash_capture = True``)


@dataclass(frozen=True, slots=True)
class LayerMarkFact:
    """A setter turning a flag on for each layer it is handed an id for
    (``setattr(self.layers[i], "<mark>", True)``), read from :mod:`flowtrace.index.layer_marks`."""

    mark: str
    container: str  # the layer list indexed, e.g. "self.layers"
    location: Location  # where the mark is set
    cleared: bool  # the setter also turns the mark off (or deletes it): no stale marks
    read_at: Location | None  # another method of the class reading the mark back (the forward)


@dataclass(frozen=True, slots=True)
class DefaultGetterFact:
    class_qualname: str
    method: str
    location: Location
    expression: str | None  # the returned expression
    source: str


@dataclass(frozen=True, slots=True)
class CaptureSiteFact:
    """Where a forward turns capture indices into captured states."""

    class_qualname: str
    function: str
    location: Location
    mechanism: Mechanism
    point: Point
    attribute: str | None  # capture attribute read, e.g. "layers_to_capture"
    loop_range: str | None  # source of the iterated range, e.g. "range(self.start_layer, self.end_layer)"
    loop_variable: str | None
    container: str | None  # name of the aux container variable
    note: str  # why this point was decided (or why unknown)
    embedding_capturable: bool | None
    last_layer_capturable: bool | None
    evidence: tuple[Location, ...] = ()  # further steps followed (layer forward, boundary helper)
    captured_expression: str | None = None  # what is stored, e.g. "hidden_states + residual"
    callback_parameter: str | None = None  # the layer-forward keyword a callback is handed in
    split_residual: bool = False  # the layer call returns (hidden_states, residual)
    uses_residual: bool = False  # the stored value depends on a residual (through local assignments)
    mutated_later: str | None = None  # an in-place update of the stored tensor after the capture
    mutated_at: Location | None = None  # where that update is
    mutated_rebound: bool = False  # the loop also rebinds the stored name (a fresh tensor per iteration)
    # Stream semantics at the loop's first iteration (see flowtrace.index.streams):
    label_offset: int | None = None  # k in `i + k in self.<attr>`: index k is met at the first iteration
    first_none: str | None = None  # operand that is None at the first iteration and is added unguarded
    first_none_at: Location | None = None  # where it is bound to None
    stored_at: Location | None = None  # the expression that would raise (the append or its local)
    # Fixed-slot collectors: built as `Cls(len(self.<attr>))`, checked when finalized.
    container_class: str | None = None  # qualified class the container is built from
    container_sized_by: str | None = None  # e.g. "len(self.layers_to_capture)"
    finalize_method: str | None = None  # `aux.<method>()` called after the loop
    finalize_at: Location | None = None
    empty_return_at: Location | None = None  # `if len(aux) == 0: return` before the finalize call
    post_loop_at: Location | None = None  # a capture after the loop (the last layer's output)
    helper_method: str | None = None  # a structurally found helper: confirmed by a HelperDefFact
    concat_order: ConcatOrder = ConcatOrder.LOOP  # how the recorded states are read back


@dataclass(frozen=True, slots=True)
class HelperDefFact:
    """A method that records a state for a capture index it is handed:
    ``def m(self, aux, label, h, r): if label in self.<attr>: aux.append(...)``.
    Found by shape, whatever its name; a loop's call to it is a capture site."""

    class_qualname: str
    method: str
    label_arg: int  # position of the label among the call's arguments (self excluded)
    container_arg: int  # -1: records into an attribute of its own object (a metadata hook)
    attribute: str
    location: Location
    guarded: bool  # the recorded value tests its None-able operand first
    recorded: str | None = None  # the recorded value, e.g. "hidden_states + residual" (loop locals followed)


@dataclass(frozen=True, slots=True)
class LayerLoopFact:
    """A loop over the decoder layers in a forward; ``captures`` says if it records aux states."""

    class_qualname: str
    function: str
    location: Location
    captures: bool


@dataclass(frozen=True, slots=True)
class CaptureModeFact:
    location: Location
    mode: str
    function: str


@dataclass(frozen=True, slots=True)
class ConcatFact:
    location: Location
    expression: str
    function: str


@dataclass(frozen=True, slots=True)
class FcFact:
    class_qualname: str
    location: Location
    in_features: str | None
    out_features: str | None


@dataclass(frozen=True, slots=True)
class ConfigReadFact:
    """A read of a draft-config layer-id key (``getattr(cfg, "key", default)``, ``cfg["key"]``, ...)."""

    key: str
    default: str | None
    location: Location
    function: str
    expression: str


@dataclass(frozen=True, slots=True)
class AttributeUseFact:
    """A read or write of a capture attribute or flag by a class's method."""

    class_qualname: str
    function: str
    attribute: str
    kind: UseKind
    location: Location


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """Something the index could not read or decide; counted and reported, never silent."""

    file: str
    line: int
    reason: str
    kind: DiagnosticKind = DiagnosticKind.PARSE_ERROR


@dataclass(frozen=True, slots=True)
class IdFunctionFact:
    """A module-level function the runner calls for a method's ids when the draft names none
    (a profile's ``[methods.*] default_function``, e.g. ``build_target_layer_ids(L, n)``)."""

    qualname: str  # module-qualified
    name: str
    location: Location
    parameters: tuple[str, ...]
    source: str  # the whole function, for the evaluator


@dataclass(frozen=True, slots=True)
class FileFacts:
    path: str
    module: str
    imports: tuple[ImportFact, ...] = ()
    classes: tuple[ClassFact, ...] = ()
    registry: tuple[RegistryFact, ...] = ()
    setters: tuple[SetterFact, ...] = ()
    default_getters: tuple[DefaultGetterFact, ...] = ()
    capture_sites: tuple[CaptureSiteFact, ...] = ()
    helper_defs: tuple[HelperDefFact, ...] = ()
    layer_loops: tuple[LayerLoopFact, ...] = ()
    capture_modes: tuple[CaptureModeFact, ...] = ()
    concat_sites: tuple[ConcatFact, ...] = ()
    fc_definitions: tuple[FcFact, ...] = ()
    config_reads: tuple[ConfigReadFact, ...] = ()
    attribute_uses: tuple[AttributeUseFact, ...] = ()
    diagnostics: tuple[Diagnostic, ...] = ()
    # Layer-forward summaries used to follow a callback into a decoder layer:
    # (class qualname, parameter name) -> point ("input"/"output"/"unknown") with a note.
    callback_uses: tuple[CallbackUse, ...] = ()
    # Stream / return-path facts for the rules (flowtrace.index.stream_facts; precision helper).
    stream_facts: tuple[StreamFact, ...] = ()
    # Return-path facts (flowtrace.index.returns): forwards' handling of their inner model's
    # output, the shapes forwards return, boolean flags set in __init__.
    output_uses: tuple[OutputUseFact, ...] = ()
    return_shapes: tuple[ReturnShapeFact, ...] = ()
    flag_defaults: tuple[FlagDefaultFact, ...] = ()
    # Facts for engines without a setter (flowtrace.index.config_sources); None when none.
    sources: SourceFacts | None = None
    # Runner calls of the entry setter and interface predicates (flowtrace.index.entry_calls).
    entry_calls: tuple[EntryCallFact, ...] = ()
    interface_predicates: tuple[InterfacePredicate, ...] = ()
    # A package ``__init__``'s ``from X import Y [as Z]``, every one with the branches around it,
    # also those a later one replaces in ``imports`` (one per platform).
    package_imports: tuple[PackageImport, ...] = ()
    # The serving path (flowtrace.index.runner_steps, flowtrace.index.layer_runs): runner
    # functions and their steps; calls in a capturing forward that run layers themselves.
    runner_functions: tuple[RunnerFunctionFact, ...] = ()
    layer_runs: tuple[LayerRunFact, ...] = ()
    # Functions a profile method names as the runner's default-id computation
    # (``[methods.*] default_function``): their source, for the evaluator.
    id_functions: tuple[IdFunctionFact, ...] = ()
    # (line, text) of the comments that name ``flowtrace:`` (suppressions), read by the index
    # worker from the bytes it parsed (flowtrace.index.comments); None when the index did not read
    # the whole file (too large, its worker lost, facts made elsewhere): the lint runner then
    # reads the file itself.
    flowtrace_comments: tuple[tuple[int, str], ...] | None = None

    @property
    def reexports(self) -> tuple[ImportFact, ...]:
        """What a registry entry naming this package and ``Z`` may load: every binding at module
        level or in a lazy ``__getattr__``, in every branch."""
        return tuple(
            ImportFact(i.local, i.qualified)
            for i in self.package_imports
            if i.name != "*" and i.function in ("", "__getattr__")
        )

    @property
    def engine_code(self) -> bool:
        """The file holds what the profiles recognise as engine code: a model registry entry, a
        capture setter, a capture site or a decoder-layer loop. A tree with none is refused by
        every command (and never cached)."""
        return bool(self.registry or self.setters or self.capture_sites or self.layer_loops)

    @classmethod
    def unparsed(cls, path: str, module: str, message: str, kind: DiagnosticKind, line: int = 0) -> FileFacts:
        """A file the indexer could not (or would not) analyse: no facts, one counted diagnostic."""
        return cls(path, module, diagnostics=(Diagnostic(path, line, message, kind),))


@dataclass(frozen=True, slots=True)
class CallbackUse:
    """How a layer's forward uses one of its parameters that may carry a capture callback.

    ``position`` is "before" when the parameter is used (called or handed on) before the
    layer's first sub-module call, "after" when after its last one, else "middle".
    ``handed_to`` names the call it was passed into, so a caller can follow it further.
    """

    class_qualname: str
    function: str
    parameter: str
    position: LayerSide
    location: Location
    handed_to: str | None = None
    # positional arguments of that first use, when it is a call (``meta.record(self.idx, h, r)``)
    arguments: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class StreamFact:
    """One stream-semantics or return-path observation about a method (see index/stream_facts.py).

    ``kind`` is "folds_residual" (a layer forward returns the stream with the residual added)
    or "early_return" (a return at ``location`` drops the aux container; ``detail`` is the test
    guarding it).
    """

    class_qualname: str
    function: str
    location: Location
    kind: StreamFactKind
    detail: str
    # early_return: how many values the return hands back (1: one value, which a caller that
    # unpacks ``(hidden, aux)`` cannot unpack; 2 or more: a tuple; 0: nothing or not known)
    values: int = 0


@dataclass(frozen=True, slots=True)
class OutputUseFact:
    """How a ``forward`` handles what ``self.<attribute>(...)`` returned (link 6; see
    index/returns.py): ``kind`` "unpack" (``h, aux = out``, ``arity`` targets), "pass"
    (returned as it is) or "drop" (``return out[0]``); ``flag``/``flag_on`` name the
    ``self.<flag>`` test it sits under (on: its body; off: its else, or after an
    ``if self.<flag>: ... return``)."""

    class_qualname: str
    function: str
    attribute: str
    kind: OutputUseKind
    arity: int
    flag: str | None
    flag_on: bool | None
    location: Location
    text: str
    # How the output reached the forward when not by ``self.<attribute>(...)``: "super()" (the
    # base's own forward, ``attribute`` its name), or the helper handed ``self.<attribute>``
    # (``helper(language_model=self.model)``), whose output is taken for that module's.
    via: str | None = None


@dataclass(frozen=True, slots=True)
class ReturnShapeFact:
    """One ``return`` of a ``forward``: ``shape`` "tuple" (``arity`` elements), "single" (a
    name only bound as a parameter or one element of an unpacking) or "other"."""

    class_qualname: str
    function: str
    location: Location
    shape: ReturnShape
    arity: int
    text: str


@dataclass(frozen=True, slots=True)
class FlagDefaultFact:
    """``self.<attribute> = True|False`` in ``__init__``, and the class's other methods that
    assign it (a flag nothing else assigns keeps this value)."""

    class_qualname: str
    attribute: str
    value: bool
    location: Location
    written_in: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class IndexStats:
    files_total: int
    files_parsed: int
    files_cached: int
    files_skipped: int
    parse_errors: int
    seconds: float


@dataclass(frozen=True, slots=True)
class IndexResult:
    root: str
    files: tuple[FileFacts, ...]
    diagnostics: tuple[Diagnostic, ...]
    stats: IndexStats
    profiles: tuple[str, ...] = field(default=())
    # What the index holds, when it used the fact cache: the cache salt (format, version,
    # analyser, profiles), the root, the diagnostics and a hash of every file's facts. Two
    # indexes with the same fingerprint hold the same facts, so later stages may reuse what
    # they derived from the facts alone; what also reads a file's text (suppression comments,
    # source snippets) keys on ``file_digests`` as well.
    fingerprint: str = ""
    file_digests: tuple[tuple[str, str], ...] = ()  # (path, content hash) of every file in ``files``
    # The package ``__init__.py`` files above the indexed files (selected or not), read for the
    # imports they pick per platform; and the ``Name:`` of each top-level ``*.dist-info``
    # (normalised): the distribution an unpacked wheel is.
    packages: tuple[PackageFacts, ...] = ()
    distributions: tuple[str, ...] = ()


# -- ids without a setter: config attributes, build contexts, metadata hooks (issue: engines as
# profiles). Appended here so that the setter-centred facts above stay as they are.
DICT_STORE = Mechanism.DICT_STORE  # by_layer[idx] = out[k] under a local flag, cat([by_layer[i] for i in ids])
HOOK = Mechanism.HOOK  # metadata.<hook>(self.layer_idx, h, r) called by the decoder layer itself


@dataclass(frozen=True, slots=True)
class IdSourceFact:
    """``self.<attribute> = getattr(config, "<key>", ())`` (kind "config") or
    ``... = ctx.<field>`` (kind "context") in a model's ``__init__``; an alias
    (``self.s = frozenset(self.<attribute>)``) is recorded with ``alias_of``."""

    class_qualname: str
    attribute: str
    kind: IdSourceKind
    key: str
    default: str | None
    location: Location
    alias_of: str | None = None


@dataclass(frozen=True, slots=True)
class GatedWrite:
    """One write of an id key, with the speculative methods under which it happens."""

    key: str
    expression: str
    condition: str  # the enclosing tests, "" when unconditional
    methods: tuple[str, ...]  # profile methods (e.g. "eagle3") for which the write can happen
    bindings: tuple[tuple[str, str], ...]  # locals assigned before it (name, expression)
    location: Location


@dataclass(frozen=True, slots=True)
class BuilderFact:
    """A config builder class: its selector, the id writes of its build, its method gate."""

    class_qualname: str
    location: Location
    selector: str  # the selector's returned expression
    selector_kind: SelectorKind
    selector_values: tuple[str, ...]
    writes: tuple[GatedWrite, ...]
    allowed_methods: tuple[str, ...] | None  # from `assert m in [...]` / a raise for others
    gate_location: Location | None
    calls: tuple[str, ...]  # other builders whose build it calls (resolved names)


@dataclass(frozen=True, slots=True)
class DictCaptureFact:
    """A capture into a dict keyed by layer under a local flag handed to the layer, then
    concatenated in the order of the id attribute (``cat([d[i] for i in ids])``)."""

    class_qualname: str
    function: str
    location: Location
    attribute: str
    flag: str
    layer_keyword: str | None  # the layer-call keyword the flag is handed in
    output_index: str | None  # which element of the layer output is stored
    concat: Location | None


@dataclass(frozen=True, slots=True)
class FlagUseFact:
    """How a layer forward uses a flag parameter: what it records and where."""

    class_qualname: str
    parameter: str
    recorded: str  # the recorded expression
    calls_before: tuple[str, ...]  # sub-module calls before it, in order
    calls_after: tuple[str, ...]
    location: Location


@dataclass(frozen=True, slots=True)
class HookCallFact:
    """``<obj>.<hook>(self.<index attr>, h, r)`` inside a layer forward."""

    class_qualname: str
    function: str
    hook: str
    index: str
    arguments: tuple[str, ...]
    calls_before: tuple[str, ...]
    calls_after: tuple[str, ...]
    location: Location
    # What the code does with the recorded state (the hook's first stream argument), read by
    # data flow rather than by sub-module names: the sub-module whose output it is
    # (``h = self.<fed_by>(...)``), and sub-modules applied to it alone after the hook (more
    # compute inside the layer; one that also takes the residual finishes the residual add).
    fed_by: str | None = None
    reworked_after: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class MetadataDefaultFact:
    """A method that writes a metadata id attribute (defaults applied in ``__post_init__``)."""

    class_qualname: str
    method: str
    attribute: str
    location: Location
    source: str


@dataclass(frozen=True, slots=True)
class SourceFacts:
    """Everything config_sources extracts from one file."""

    id_sources: tuple[IdSourceFact, ...] = ()
    builders: tuple[BuilderFact, ...] = ()
    feeds: tuple[GatedWrite, ...] = ()
    dict_captures: tuple[DictCaptureFact, ...] = ()
    flag_uses: tuple[FlagUseFact, ...] = ()
    hook_calls: tuple[HookCallFact, ...] = ()
    metadata_defaults: tuple[MetadataDefaultFact, ...] = ()
    serving_reads: tuple[Location, ...] = ()

    def __bool__(self) -> bool:
        return any(
            (
                self.id_sources,
                self.builders,
                self.feeds,
                self.dict_captures,
                self.flag_uses,
                self.hook_calls,
                self.metadata_defaults,
                self.serving_reads,
            )
        )

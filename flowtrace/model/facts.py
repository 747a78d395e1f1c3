"""The frozen records every stage of the pipeline passes on.

Facts are plain, slotted, frozen dataclasses holding strings, ints and tuples only: they
cross process boundaries (the parse pool), go into the on-disk cache (pickled) and are
compared in tests. No libcst node ever leaves the visitor that found it.

Locations are POSIX paths relative to the scanned root, with 1-based lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Id transforms: how a setter maps the draft's config ids to capture indices.
PLUS_ONE = "plus_one"
IDENTITY = "identity"
CONDITIONAL = "conditional"
DELEGATES = "delegates"
OTHER = "other"
TRANSFORMS = (PLUS_ONE, IDENTITY, CONDITIONAL, DELEGATES, OTHER)

# Capture points, relative to an index i held in the capture attribute.
INPUT = "input"  # index i yields boundary i (the input of layer i)
OUTPUT = "output"  # index i yields boundary i + 1 (the output of layer i)
UNKNOWN = "unknown"

# Capture mechanisms.
APPEND = "append"  # aux.append(...) inside the layer loop
CALLBACK = "callback"  # a callback or collector handed to layer i
PACKER = "packer"  # a packer object handed to layer i or appended to
HELPER = "helper"  # self._maybe_add_hidden_state(aux, label, h, r)


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
class AttributeAssignment:
    """``self.<attribute> = <Callee>(...)`` in a class's ``__init__`` (or a class-level value).

    ``callee`` is resolved through the module's imports when possible (a qualified name),
    else the raw source text. Delegation and holder resolution read these.
    """

    attribute: str
    callee: str
    line: int


@dataclass(frozen=True, slots=True)
class ClassFact:
    name: str
    qualname: str  # module-qualified, e.g. "sglang.srt.models.llama.LlamaForCausalLM"
    location: Location
    bases: tuple[str, ...]  # resolved qualified names where the import table allows
    methods: tuple[str, ...]
    assignments: tuple[AttributeAssignment, ...] = ()


@dataclass(frozen=True, slots=True)
class RegistryFact:
    """One registration: an ``EntryClass`` value or an architecture-dict entry."""

    architecture: str  # the architecture string, or the class name for EntryClass
    target: str  # qualified class name
    location: Location
    kind: str  # "entry_class" | "registry_dict"
    group: str = ""  # the registry dict's name, for registry_dict entries


@dataclass(frozen=True, slots=True)
class SetterBranch:
    """One assignment (or delegation call) a setter performs, under a textual condition."""

    condition: str | None  # conjunction of the enclosing if-tests, "not (...)" for else arms
    target: str  # e.g. "self.model.layers_to_capture" or "self.language_model.set_eagle3_layers_to_capture()"
    expression: str  # the assigned value or the call's first argument
    transform: str  # transform of this arm alone
    line: int


@dataclass(frozen=True, slots=True)
class SetterFact:
    class_qualname: str
    method: str
    location: Location
    parameter: str | None  # name of the ids parameter
    id_transform: str
    transform_note: str | None
    default_layers: str | None  # source text of the default-ids expression
    writes: tuple[str, ...]  # attribute targets written with ids (source text)
    delegate: str | None  # e.g. "self.language_model" when ids go to another object's setter
    delegate_method: str | None
    pp_guard: bool  # returns early on non-last pipeline ranks
    branches: tuple[SetterBranch, ...]
    source: str  # the whole method, for the evaluator


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
    mechanism: str  # APPEND | CALLBACK | PACKER | HELPER
    point: str  # INPUT | OUTPUT | UNKNOWN
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
    kind: str  # "read" | "write"
    location: Location


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """Something the index could not read or decide; counted and reported, never silent."""

    file: str
    line: int
    reason: str
    kind: str = "parse-error"  # parse-error | unreadable | too-large | timeout | skipped | unresolved


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
    position: str
    location: Location
    handed_to: str | None = None


@dataclass(frozen=True, slots=True)
class StreamFact:
    """One stream-semantics or return-path observation about a method (see index/stream_facts.py).

    ``kind`` is "folds_residual" (a layer forward returns the stream with the residual added),
    "none_residual" (the capture at ``location`` adds a residual still None at the first index;
    ``detail`` is "name:line" of the None binding) or "early_return" (a return at ``location``
    drops the aux container; ``detail`` is the test guarding it).
    """

    class_qualname: str
    function: str
    location: Location
    kind: str
    detail: str


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

"""Does this draft match what this engine will feed it? One deployment, one verdict.

Reads the target's ``config.json`` (architecture, layer count, hidden size; nested
``text_config`` for multimodal targets) and the draft's (layer ids wherever the formats put
them, ``target_hidden_size``), resolves the architecture through the engine's registry,
traces what the engine serves, converts the draft's ids to the boundaries it was trained on
under a training convention (``rules/training/*.toml``) or takes them as given
(``--trained-boundaries``), and compares slot by slot. Each differing slot cites the line that
decides it; on MISMATCH, :mod:`flowtrace.analysis.suggest` searches the ids that would make the
engine serve the trained layout. A draft folder's safetensors header gives the fc width, the
one number the weights themselves fix.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from flowtrace.model import facts as F
from flowtrace.analysis.boundaries import offset
from flowtrace.analysis.drafts import draft_classes, fixed_state_count
from flowtrace.engines.drafts import EAGLE3, CatalogueDraft, DraftCatalogue
from flowtrace.engines.methods import LEGACY
from flowtrace.engines.training import (
    LayoutError, TrainingConvention, id_range, invalid_ids, layout, load_conventions, needs_draft_layers, to_boundaries,
)
from flowtrace.analysis.resolve import ModelRow, Project
from flowtrace.model.links import CaptureChain, Production
from flowtrace.analysis.suggest import Suggestion, decided, deciding_setter, outcome, reason, suggest
from flowtrace.analysis.method_ids import trace_for_method
from flowtrace.analysis.trace import TraceResult
from flowtrace.sources.checkpoint import DraftCheckpoint, read_draft_checkpoint
from flowtrace.sources.configs import ConfigError, lookup, read_config

if TYPE_CHECKING:
    from flowtrace.analysis.serving_phase import PhaseTrace

@dataclass(frozen=True, slots=True)
class TargetInfo:
    architecture: str
    num_layers: int
    hidden_size: int | None


def target_info(config: dict[str, object], path: str) -> TargetInfo:
    archs = config.get("architectures")
    text_config = config.get("text_config")
    text: dict[str, object] = text_config if isinstance(text_config, dict) else {}
    if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
        raise ConfigError(f"{path}: the target config has no 'architectures' list")
    layers = config.get("num_hidden_layers", text.get("num_hidden_layers"))
    hidden = config.get("hidden_size", text.get("hidden_size"))
    if not isinstance(layers, int) or isinstance(layers, bool) or layers <= 0:
        raise ConfigError(
            f"{path}: the target config has no positive integer 'num_hidden_layers' (also looked in text_config)"
        )
    if layers > 100_000:
        raise ConfigError(f"{path}: the target config's num_hidden_layers = {layers} is implausible (at most 100000)")
    return TargetInfo(archs[0], layers, hidden if isinstance(hidden, int) else None)


def _ids(value: object, where: str) -> list[int] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ConfigError(f"{where}: layer ids must be a list of integers, found {value!r}")
    return list(value)


def detect_training(
    draft: dict[str, object], conventions: dict[str, TrainingConvention], preferred: str = ""
) -> TrainingConvention:
    """The convention whose format keys the draft holds (the ``preferred`` one first: the
    training convention of the method compat answers for, a profile's ``[methods.*] training``),
    else the preferred one, else SpecForge's."""
    held = [c for c in conventions.values() if c.detect_keys and any(k in draft for k in c.detect_keys)]
    chosen = next((c for c in held if c.name == preferred), None) or next(iter(held), None)
    chosen = chosen or conventions.get(preferred)
    return chosen or conventions.get("specforge") or next(iter(conventions.values()))


def _count(draft: dict[str, object] | None, key: str) -> int | None:
    value = lookup(draft, key) if draft is not None and key else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def default_ids(
    conv: TrainingConvention, num_layers: int, draft: dict[str, object] | None = None
) -> tuple[list[int], str]:
    """(ids, on what) of the convention's default layout for this draft: its trainer computed it
    for the target's layer count (or the one the draft config records, ``layers_key``) and, for a
    layout spread over the draft's own layers, the draft's layer count (``draft_layers_key``)."""
    layers = _count(draft, conv.layers_key) or num_layers
    draft_layers = _count(draft, conv.draft_layers_key)
    try:
        ids = list(layout(conv.default_ids, layers, draft_layers))
    except LayoutError as exc:
        if needs_draft_layers(conv.default_ids) and draft_layers is None:
            raise ConfigError(
                f"the draft config names no ids and no positive {conv.draft_layers_key}: the {conv.name} default "
                f"layout is computed from the draft's layer count (give the ids, or --trained-boundaries)"
            ) from None
        raise ConfigError(f"training profile {conv.name}: default_ids {conv.default_ids!r}: {exc}") from None
    on = []
    if layers != num_layers:
        on.append(f"L = {layers}, the draft's {conv.layers_key}")
    if needs_draft_layers(conv.default_ids):
        on.append(f"N = {draft_layers}, the draft's {conv.draft_layers_key}")
    if on and layers == num_layers:
        on.insert(0, f"L = {layers}")
    return ids, "; ".join(on)


def trained_boundaries(
    conv: TrainingConvention, ids: list[int] | None, num_layers: int, draft: dict[str, object] | None = None,
) -> tuple[list[int], list[str], list[int]]:
    """(boundaries, notes, used ids) the draft was trained on (the arithmetic:
    :func:`flowtrace.engines.training.to_boundaries`)."""
    notes: list[str] = []
    if ids is None:
        ids, on = default_ids(conv, num_layers, draft)
        said = f" (for {on})" if on else ""
        keys = " or ".join(conv.layer_id_keys)
        default = f"the {conv.name} default {conv.default_ids} = {ids}{said}"
        notes.append(f"no {conv.name} ids in the draft config (key {keys}): {default}")
    out, more = to_boundaries(conv.meaning, ids, num_layers)
    return list(out), notes + list(more), ids



class SlotForm(F.Word):
    """How a differing slot was paired (the renderer words each form)."""

    PATH = "path"  # one draft id followed through the setter to the boundary recorded
    PAIR = "pair"  # same count: the fc's inputs position by position
    MISSING = "missing"  # a trained boundary the engine does not serve (counts differ)
    EXTRA = "extra"  # a served boundary the draft was not trained on (counts differ)


@dataclass(frozen=True, slots=True)
class SlotDifference:
    """One slot where training and serving disagree, with the line that decides it and the
    trace's account of why (render: :func:`flowtrace.render.compat_words.slot_why`)."""

    slot: int
    trained: int | None
    served: int | None
    decided_at: F.Location | None
    reason: str  # the trace's words for what decided it (a setter branch, a dropping capture site)
    form: SlotForm
    draft_id: int | None = None  # PATH: the draft's id and the engine's index for it
    engine_index: int | None = None
    recorded: bool = False  # PATH while the forward raises: what the loop records before it does


class DifferenceKind(F.Word):
    """What kind of difference decides a MISMATCH (the renderer words each kind)."""

    SLOT = "slot"
    UNDECIDED = "undecided"
    RAISES = "raises"
    NOTHING = "nothing"
    COUNT = "count"
    WIDTH = "width"
    CHECKPOINT_OTHER_TARGET = "checkpoint_other_target"
    CHECKPOINT_LAYOUT = "checkpoint_layout"
    CHECKPOINT_SERVED = "checkpoint_served"
    FIT = "fit"  # trained boundaries past the target's last layer: the draft was trained on a deeper model
    PHASE = "phase"  # a phase of serving (graph replay, after a weight reload) holds other ids than the draft's
    DRAFT_CLASS = "draft_class"  # the engine's draft class sizes its fc for another number of states
    DELTAS = "deltas"  # the states handed over are layer outputs without the residual, no boundaries


@dataclass(frozen=True, slots=True)
class Difference:
    """One reason for MISMATCH, as data: which numbers disagree and where; no words."""

    kind: DifferenceKind
    slot: SlotDifference | None = None  # SLOT
    numbered: bool = True  # SLOT: the slots line up position by position
    reason: str | None = None  # UNDECIDED / RAISES / NOTHING: the trace's reason
    at: F.Location | None = None  # RAISES / NOTHING: where the engine raises; PHASE, DRAFT_CLASS: the capture, the fc
    expected: int | None = None  # COUNT, CHECKPOINT_*: states the fc takes; WIDTH: the draft's target_hidden_size
    # COUNT, CHECKPOINT_SERVED: states captured; CHECKPOINT_LAYOUT: the layout's count; WIDTH: hidden_size
    got: int | None = None
    hidden: int | None = None  # the target's hidden size
    beyond: tuple[tuple[int, int], ...] = ()  # FIT: (draft id, trained boundary) past the last layer
    layers: int | None = None  # FIT: the target's L
    phase: PhaseTrace | None = None  # PHASE: the phase's trace


@dataclass(frozen=True, slots=True)
class CompatResult:
    verdict: str  # MATCH | MISMATCH
    model: str
    architecture: str
    num_layers: int
    hidden_size: int | None
    convention: str
    draft_ids: tuple[int, ...] | None
    engine_ids: tuple[int, ...] | None
    engine_key: str | None
    trained: tuple[int, ...]
    served: tuple[int, ...] | None
    differences: tuple[Difference, ...]  # words: flowtrace.render.compat_words
    notes: tuple[str, ...]
    trace: TraceResult
    slots: tuple[SlotDifference, ...] = ()
    suggestions: tuple[Suggestion, ...] = ()
    checkpoint: DraftCheckpoint | None = None
    engine_default: str | None = None  # what the engine does when the draft names no ids
    training_default: str | None = None
    id_paths: tuple[IdPath, ...] = ()
    warnings: tuple[str, ...] = ()  # what went unchecked or looks wrong without deciding the verdict
    no_fix: str | None = None  # why no ids are suggested although the layouts differ
    assumed: tuple[str, ...] = ()  # the training convention and default compat assumed (said with -v)
    draft_ids_key: str | None = None  # where draft_ids were read; None: the convention's default ids
    # The speculative method answered for, when it is not the profiles' default (its label),
    # and why (named with --method, or picked from the draft config: flowtrace.analysis.method_choice).
    method: str | None = None
    method_why: str | None = None

    @property
    def exit_code(self) -> int:
        return 0 if self.verdict == "MATCH" else 1



def parse_boundaries(text: str) -> list[int]:
    """``0,3,31`` -> [0, 3, 31] (``--trained-boundaries``)."""
    try:
        values = [int(x) for x in text.replace(" ", "").strip("[]").split(",") if x]
    except ValueError:
        raise ConfigError(
            f"--trained-boundaries must be comma-separated integers (boundaries, 0 = embedding), got {text!r}"
        ) from None
    if not values:
        raise ConfigError("--trained-boundaries names no boundary")
    return values


def _convention(draft: dict[str, object], trained_with: str | None, preferred: str = "") -> TrainingConvention:
    conventions = load_conventions()
    if trained_with:
        if trained_with not in conventions:
            raise ConfigError(f"unknown --trained-with {trained_with!r} (choose from {', '.join(sorted(conventions))})")
        return conventions[trained_with]
    return detect_training(draft, conventions, preferred)


def _method_training(project: Project) -> str:
    """The training convention the profiles declare for the method compat answers for."""
    method = project.conv.method
    return method.training if method is not None else ""


def _draft_layers(project: Project, draft: dict[str, object]) -> int | None:
    """The draft's layer count where the method's runner computes default ids from it
    (``[methods.*] draft_layers_key``): what ``trace --draft-layers`` gives by hand."""
    method = project.conv.method
    return _count(draft, method.draft_layers_key) if method is not None else None


RECORD_KEY, RECORD_FIELD = "flowtrace", "trained_boundaries"  # written by `compat --fix`


def recorded_boundaries(draft: dict[str, object], where: str) -> list[int] | None:
    """The trained layout ``compat --fix`` recorded in the draft config (``"flowtrace":
    {"trained_boundaries": [...]}``): once it rewrote the ids for the engine, converting them
    under the training convention would no longer give what the draft was trained on."""
    record = draft.get(RECORD_KEY)
    if not isinstance(record, dict) or RECORD_FIELD not in record:
        return None
    return _ids(record[RECORD_FIELD], f"{where}: {RECORD_KEY}.{RECORD_FIELD}")


def _first_ids(draft: dict[str, object], keys: tuple[str, ...], where: str) -> tuple[list[int] | None, str | None]:
    for key in keys:
        ids = _ids(lookup(draft, key), f"{where}: {key}")
        if ids is not None:
            return ids, key
    return None, None


def _dropped_steps(trace: TraceResult) -> list[tuple[int | None, F.Location, str]]:
    """(capture index, location, text) of each id the capture site never records."""
    return [
        (step.index, step.location, step.text)
        for step in trace.steps
        if step.kind == "dropped" and step.location is not None
    ]


def _setter_branch(trace: TraceResult) -> tuple[F.Location | None, str]:
    """(location, why) of the write that set the capture indices, with the last branch
    decision before it when the trace records branch steps."""
    writes = [s for s in trace.steps if s.kind in ("setter", "builder", "default") and s.location is not None]
    if not writes:
        located = [s for s in trace.steps if s.location is not None]
        builder = next((s for s in located if s.kind == "builder"), None) or next(
            (s for s in located if s.kind == "config"), None
        )
        if builder is not None:  # setter-less engines: the line that writes (or reads) the ids
            return builder.location, f"decided by the engine: {builder.text}"
        return None, "decided by the setter"
    write = writes[-1]
    position = trace.steps.index(write)
    branch = next((s for s in reversed(trace.steps[:position]) if s.kind == "branch"), None)
    what = write.text.split("  [")[0].split(": ", 1)[-1]
    if branch is not None:
        decision = branch.text.split(": ", 1)[-1]
        return write.location, f"{decision} [{branch.location}], so {what}"
    tag = write.text.split("  [")[-1].rstrip("]") if "  [" in write.text else ""
    who = "the setter" if write.kind == "setter" else "the engine's own layout:"  # builder / metadata default
    return write.location, f"{who} {what}" + (f" ({tag})" if tag else "")


def _path_differences(trace: TraceResult, paths: list[IdPath], recorded: bool = False) -> list[SlotDifference]:
    """Slot by slot along each draft id's path: a shifted id cites the setter branch that
    mapped it, a dropped id the capture site that never records it."""
    setter_at, setter_why = _setter_branch(trace)
    drops = {index: (at, text) for index, at, text in _dropped_steps(trace)}
    out = []
    for k, p in enumerate(paths):
        if p.served == p.trained:
            continue
        at, why = drops.get(p.engine_index, (setter_at, setter_why)) if p.served is None else (setter_at, setter_why)
        out.append(SlotDifference(k, p.trained, p.served, at, why, SlotForm.PATH, p.draft_id, p.engine_index, recorded))
    return out


def _slot_differences(trace: TraceResult, want: list[int], served: list[int]) -> list[SlotDifference]:
    """What the fc receives that it was not trained on.

    Same count: slot by slot (the fc's inputs position by position), each citing the setter
    branch that produced the served boundary. Different counts: positions no longer line up,
    so each trained boundary the engine does not serve is listed with the dropped id's capture
    site, and each served boundary the draft was not trained on with the setter branch."""
    setter_at, setter_why = _setter_branch(trace)
    if len(want) == len(served):
        return [
            SlotDifference(k, a, b, setter_at, setter_why, SlotForm.PAIR)
            for k, (a, b) in enumerate(zip(want, served))
            if a != b
        ]
    drops = iter([(at, text) for _, at, text in _dropped_steps(trace)])
    out = []
    for k, a in enumerate(want):
        if a not in served:
            at, why = next(drops, (setter_at, setter_why))
            out.append(SlotDifference(k, a, None, at, why, SlotForm.MISSING))
    for k, b in enumerate(served):
        if b not in want:
            out.append(SlotDifference(k, None, b, setter_at, setter_why, SlotForm.EXTRA))
    return out


@dataclass(frozen=True, slots=True)
class IdPath:
    """One draft id followed through both sides: what training meant by it, what index the
    engine's setter made of it, and the boundary the loop records (None: not recorded)."""

    draft_id: int
    trained: int
    engine_index: int
    served: int | None


def _id_paths(
    row: ModelRow, trace: TraceResult, draft_ids: list[int] | None, engine_ids: list[int] | None, trained: list[int]
) -> list[IdPath]:
    """Per id, when the engine reads the same ids training did and its setter maps them one
    to one (same count, no reordering by set/sort); otherwise [] (no pairing is honest).
    Also when the forward later raises: the paths say what the loop records before it does."""
    indices = trace.capture_indices
    if (
        not draft_ids
        or draft_ids != engine_ids
        or indices is None
        or len(indices) != len(draft_ids)
        or not decided(trace)
    ):
        return []
    chain = row.chain  # the site link's capture point decides index -> boundary
    site = chain.site if chain is not None and chain.source.kind == F.SourceKind.SETTER else None
    if site is None or site.point not in (F.INPUT, F.OUTPUT):
        return []
    if sorted(indices) == list(indices) and sorted(draft_ids) != list(draft_ids):
        return []  # the setter sorted them: positions no longer pair
    shift = offset(site.point)  # checked above: an input or an output point
    dropped = {i for i, _ in trace.dropped}
    return [
        IdPath(i, b, idx, None if idx in dropped else idx + shift) for i, b, idx in zip(draft_ids, trained, indices)
    ]


def _checkpoint_differences(
    ckpt: DraftCheckpoint | None, hidden: int | None, trained: int, served: list[int] | None
) -> tuple[list[Difference], list[str]]:
    """(differences, notes) from the fc weight's width: against the target hidden size, the
    draft config's number of ids, and what the engine captures."""
    if ckpt is None:
        return [], []
    if ckpt.fc_in_features is None:
        return [], [
            f"checkpoint {ckpt.file}: no 2-D fc.weight among {ckpt.tensor_count} tensors (namings:"
            f" {', '.join(ckpt.namings) or 'none recognised'})"
        ]
    width, name = ckpt.fc_in_features, ckpt.fc_name
    if not hidden:
        return [], [f"checkpoint {ckpt.file}: {name} in_features {width}; the target hidden size is unknown"]
    slots = ckpt.slots(hidden)
    if slots is None:
        return [Difference(DifferenceKind.CHECKPOINT_OTHER_TARGET, hidden=hidden)], []
    out = []
    if slots != trained:
        out.append(Difference(DifferenceKind.CHECKPOINT_LAYOUT, expected=slots, got=trained, hidden=hidden))
    if served is not None and slots != len(served):
        out.append(Difference(DifferenceKind.CHECKPOINT_SERVED, expected=slots, got=len(served), hidden=hidden))
    return out, [
        f"checkpoint {ckpt.file}: {name} {list(ckpt.fc_shape or ())} = {slots} x {hidden} (namings:"
        f" {', '.join(ckpt.namings)})"
    ]


WEIGHT_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".safetensors")


def _unchecked_weights(draft_dir: Path) -> str:
    """What a draft folder without a readable safetensors file leaves unchecked, and why."""
    found = sorted(p.name for p in draft_dir.iterdir() if p.suffix in WEIGHT_SUFFIXES)[:4] if draft_dir.is_dir() else []
    what = f"only {', '.join(found)}" if found else "no weight file"
    return (
        f"unchecked: {draft_dir} has {what}; flowtrace reads safetensors headers only (a .bin file is a pickle, never"
        " loaded), so the fc width was not checked against the draft config's ids"
    )


def _hidden_size_warning(draft: dict[str, object], hidden: int | None, states: int) -> str | None:
    """The draft's own hidden_size unlike the target's, with no target_hidden_size to say which
    width the fc takes: engines then size the fc input from the draft's hidden_size."""
    own = draft.get("hidden_size")
    if (
        not isinstance(own, int)
        or isinstance(own, bool)
        or not hidden
        or own == hidden
        or "target_hidden_size" in draft
    ):
        return None
    return (
        f"width: the draft's hidden_size {own} differs from the target's {hidden} and the draft config has no"
        f" target_hidden_size: engines then build the fc for {states} x {own} = {states * own} inputs, the target"
        f" delivers {states} x {hidden} = {states * hidden}; set target_hidden_size = {hidden} if the draft was trained"
        " on this target"
    )


def _beyond_target(trained: list[int], used: list[int] | None, L: int) -> tuple[tuple[int, int], ...]:
    """(draft id, trained boundary) of each trained boundary past the target's last layer:
    the draft was trained on a deeper model."""
    ids = used if used is not None and len(used) == len(trained) else trained
    return tuple((i, b) for i, b in zip(ids, trained) if b > L)


def _contradicting_weights(ckpt: DraftCheckpoint | None, hidden: int | None, states: int) -> int | None:
    """The number of states the fc weight takes when it contradicts the draft config's count."""
    slots = ckpt.slots(hidden) if ckpt is not None and ckpt.fc_in_features is not None and hidden else None
    return slots if slots is not None and slots != states else None


def _no_fix_reason(
    beyond: bool,
    weights_say: int | None,
    states: int,
    ckpt: DraftCheckpoint | None,
    hidden: int | None,
    target_hidden: object,
    target: int | None,
) -> str | None:
    """Why changing the ids cannot help: no fix is offered that the draft itself contradicts."""
    if beyond:
        return (
            "the draft was trained on a deeper target; no ids or engine change make this target serve those layers: use"
            " a draft trained for this target"
        )
    if weights_say is not None and ckpt is not None:
        return (
            f"the weights contradict the draft config: {ckpt.fc_name} {list(ckpt.fc_shape or ())} takes {weights_say} x"
            f" {hidden}, the config names {states} ids; find the {weights_say} layers the draft was trained on (its"
            " training config) before changing any ids"
        )
    if isinstance(target_hidden, int) and target and target_hidden != target:
        return f"the draft was trained for a target of hidden size {target_hidden}, not {target}: no ids fix a width"
    return None


def _trained_for_another_target(ckpt: DraftCheckpoint | None, hidden: int | None) -> bool:
    """The checkpoint's fc width is no multiple of the target's hidden size: no choice of ids
    can fix that, so compat suggests none (decided on the numbers, not on a message)."""
    return ckpt is not None and ckpt.fc_in_features is not None and bool(hidden) and ckpt.slots(hidden) is None


def _defaults(
    project: Project, row: ModelRow, conv: TrainingConvention, L: int, hidden: int | None,
    draft: dict[str, object] | None = None,
) -> tuple[str, str]:
    """(engine default, training default) for a draft config without ids."""
    drafted = _draft_layers(project, draft) if draft is not None else None
    # the runner's default first, as the trace phase
    fallback = trace_for_method(project, row, None, L, hidden, draft_layers=drafted)
    if outcome(fallback) == "captures" and fallback.boundaries is not None:
        source = next((s for s in fallback.steps if s.kind == "config" and s.location is not None), None)
        at, _ = deciding_setter(fallback)
        where = f" ({source.text} at {source.location})" if source else (f" (setter at {at})" if at else "")
        engine = f"the engine falls back to its default: boundaries {list(fallback.boundaries)}{where}"
    else:
        engine = f"the engine has no usable default: {reason(fallback) or outcome(fallback)}"
    try:
        boundaries, _, used = trained_boundaries(conv, None, L, draft)
    except ConfigError as exc:  # a default computed from what this draft config does not say
        return engine, f"the {conv.name} training default {conv.default_ids}: {exc}"
    _, on = default_ids(conv, L, draft)
    said = f" (for {on})" if on else ""
    training = f"the {conv.name} training default {conv.default_ids} = ids {used}{said} -> boundaries {boundaries}"
    return engine, training


# --------------------------------------------------------------------------- the phases
# compat = read_inputs -> trace_phase -> pair -> judge -> suggestions; each phase returns a
# frozen record the next one reads, so each can be tested and read on its own.


@dataclass(frozen=True, slots=True)
class CompatInputs:
    """Phase 1: the two configs read and checked, the target's class found, the draft's ids and
    the layout it was trained on (converted under a training convention, or given)."""

    target: dict[str, object]
    draft: dict[str, object]
    info: TargetInfo
    conv: TrainingConvention
    row: ModelRow
    draft_ids: list[int] | None  # under the training convention's keys
    engine_ids: list[int] | None  # under the keys the engine reads
    engine_key: str | None
    checkpoint: DraftCheckpoint | None
    trained: list[int]
    used: list[int] | None  # the ids the trained layout was converted from
    convention_name: str
    notes: tuple[str, ...]
    given: bool  # --trained-boundaries: the layout was given, not converted
    draft_dir: Path | None  # the draft given as a folder (its weights may be read)
    assumed: tuple[str, ...] = ()  # the convention and default compat assumed (-v)
    row_project: Project | None = None  # the tree's project (its draft classes are checked too)
    draft_ids_key: str | None = None  # where draft_ids were read (None: the convention's default)

    @property
    def target_hidden(self) -> int | None:
        """The draft config's ``target_hidden_size`` when it is an integer."""
        value = self.draft.get("target_hidden_size")
        return value if isinstance(value, int) else None


@dataclass(frozen=True, slots=True)
class Traced:
    """Phase 2: what the engine does with the ids it reads (or its own layout)."""

    trace: TraceResult
    engine_ids: list[int] | None  # None where the engine reads no ids (no setter: its own layout)
    engine_key: str | None
    engine_default: str | None
    training_default: str | None
    notes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Pairing:
    """Phase 3: the trained and served layouts side by side, slot by slot."""

    served: list[int] | None  # None: the engine serves nothing usable (raises, nothing, undecided)
    want: list[int]  # the trained boundaries in layer order (engines concatenate in layer order)
    paths: list[IdPath]
    slots: list[SlotDifference]
    numbered: bool  # the slots line up position by position ("slot k: ..." lines)


def read_inputs(
    project: Project,
    target_config: str | Path,
    draft_config: str | Path,
    *,
    trained_with: str | None,
    engine_keys: tuple[str, ...],
    trained_boundaries_given: list[int] | None,
) -> CompatInputs:
    target = read_config(target_config, "target")
    draft = read_config(draft_config, "draft")
    checkpoint = read_draft_checkpoint(draft_config) if Path(draft_config).is_dir() else None
    draft_dir = Path(draft_config) if Path(draft_config).is_dir() else None
    return inputs_from(
        project,
        target,
        draft,
        str(target_config),
        str(draft_config),
        trained_with=trained_with,
        engine_keys=engine_keys,
        trained_boundaries_given=trained_boundaries_given,
        checkpoint=checkpoint,
        draft_dir=draft_dir,
    )


def _draft_markers(
    project: Project,
    draft: dict[str, object],
    keys: tuple[str, ...],
    conventions: dict[str, TrainingConvention],
    checkpoint: DraftCheckpoint | None,
) -> list[str]:
    """What makes ``draft`` a draft config: a draft architecture (a class of this engine that
    owns a draft fc, flowtrace.analysis.drafts), a layer-id key, a training format's own key,
    a target_hidden_size / draft_vocab_size, or a draft fc in its weights."""
    found = []
    archs = draft.get("architectures")
    names = [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []
    drafts = draft_classes(project.files)
    rows = [project.row(a) for a in names]
    if any(r is not None and r.qualname in drafts for r in rows):
        found.append("a draft architecture")
    found += [f"the key {k}" for k in keys if lookup(draft, k) is not None]
    found += [f"the key {k}" for c in conventions.values() for k in c.detect_keys if k in draft]
    found += [f"the key {k}" for k in ("target_hidden_size", "draft_vocab_size") if k in draft]
    if checkpoint is not None and checkpoint.fc_in_features is not None:
        found.append("an fc weight")
    return found


def _refuse_non_draft(
    project: Project, draft: dict[str, object], where: str, keys: tuple[str, ...], checkpoint: DraftCheckpoint | None
) -> None:
    """``{}`` or a target's own config.json given as the draft: no verdict can mean anything."""
    conventions = load_conventions()
    if _draft_markers(project, draft, keys, conventions, checkpoint):
        return
    archs = draft.get("architectures")
    said = f"architectures {archs}" if archs else "no architectures"
    method = project.conv.method
    label = method.title if method is not None else LEGACY[1]  # the method compat answers for
    article = "an" if label[:1].upper() in "AEIOU" else "a"
    raise ConfigError(
        f"{where}: not {article} {label} draft config ({said}, no draft architecture of this engine, no layer-id key"
        f" ({', '.join(keys)}) and no draft fc weight): give the draft's own config.json or folder, or"
        " --trained-boundaries B0,B1,... to compare the engine with a layout you state"
    )


def _check_ids(conv: TrainingConvention, ids: list[int] | None, L: int, where: str) -> None:
    """Ids the convention cannot mean (below its embedding id, past the last layer, repeated)
    are an input error naming the valid range, not a layout to analyse."""
    if ids is None:
        return
    why = invalid_ids(conv.meaning, ids, L)
    if why is not None:
        low, high = id_range(conv.meaning, L)
        beyond = any(isinstance(i, int) and i > high for i in ids)
        fit = (
            f"; this draft does not fit this target (L = {L}): it was trained for a deeper one, or the target config is"
            " not its target"
            if beyond
            else ""
        )
        raise ConfigError(
            f"{where}: layer ids {ids} are impossible under the {conv.name} convention ({conv.meaning}): {why}; valid"
            f" ids are distinct integers {low}..{high} for this {L}-layer target{fit} (or give --trained-with /"
            " --trained-boundaries)"
        )


def inputs_from(
    project: Project, target: dict[str, object], draft: dict[str, object], target_where: str, draft_where: str, *,
    trained_with: str | None,
    engine_keys: tuple[str, ...], trained_boundaries_given: list[int] | None, checkpoint: DraftCheckpoint | None = None,
    draft_dir: Path | None = None, known_draft: bool = False, convention_from: str = "--trained-with",
) -> CompatInputs:
    """Phase 1 on configs already read (a catalogue draft is given this way, without files)."""
    info = target_info(target, target_where)
    L = info.num_layers
    conv = _convention(draft, trained_with, _method_training(project))
    keys = tuple(dict.fromkeys((*engine_keys, *conv.layer_id_keys)))
    row = project.row(info.architecture)
    if row is None:
        raise ConfigError(
            f"{target_where}: architecture {info.architecture!r} is not registered in this engine tree (no model class"
            " found)"
        )
    if trained_boundaries_given is None and not known_draft:
        _refuse_non_draft(project, draft, draft_where, keys, checkpoint)
    draft_ids, draft_key = _first_ids(draft, conv.layer_id_keys, draft_where)
    engine_ids, engine_key = _first_ids(draft, engine_keys, draft_where)
    recorded = recorded_boundaries(draft, draft_where) if trained_boundaries_given is None else None
    if recorded is not None:
        trained, notes, used = (
            recorded,
            [f"training layout recorded in the draft config by `flowtrace compat --fix` ({RECORD_KEY}.{RECORD_FIELD})"],
            draft_ids,
        )
        convention_name = "recorded"
    elif trained_boundaries_given is not None:
        bad = [b for b in trained_boundaries_given if not 0 <= b <= L]
        if bad:
            raise ConfigError(f"--trained-boundaries {bad} outside 0..{L} (0 = embedding, {L} = last layer's output)")
        trained, notes, used = (
            list(trained_boundaries_given),
            ["training layout given by --trained-boundaries (the draft config's ids are not converted)"],
            draft_ids,
        )
        convention_name = "given"
    else:
        _check_ids(conv, draft_ids, L, f"{draft_where}: {draft_key}")
        trained, notes, used = trained_boundaries(conv, draft_ids, L, draft)
        convention_name = conv.name
        if draft_ids is None and engine_ids is not None:
            notes.append(_ids_elsewhere(draft, conv, engine_key, engine_ids))
    return CompatInputs(
        target,
        draft,
        info,
        conv,
        row,
        draft_ids,
        engine_ids,
        engine_key,
        checkpoint,
        trained,
        used,
        convention_name,
        tuple(notes),
        trained_boundaries_given is not None or recorded is not None,
        draft_dir,
        _assumed(conv, draft, trained_with and convention_from, draft_ids, L, _method_training(project)),
        project,
        draft_key,
    )


def _assumed(
    conv: TrainingConvention, draft: dict[str, object], trained_with: str | None, ids: list[int] | None, L: int,
    preferred: str = "",
) -> tuple[str, ...]:
    """What compat assumed about the draft, for ``-v``: the training convention and why, and
    the default layout taken when the draft config names no ids."""
    keys = [k for k in conv.detect_keys if k in draft]
    if trained_with:
        why = trained_with  # where the convention was named (--trained-with, the catalogue entry)
    elif keys:
        why = f"detected: the draft config has {', '.join(keys)}"
    elif conv.name == preferred:
        why = "no format key matched: the training convention of the method answered ([methods.*] training)"
    else:
        why = "no format key matched: the default convention"
    out = [f"training convention: {conv.name} ({conv.description}; {why})"]
    if ids is None:
        used, on = default_ids(conv, L, draft)
        on = on or f"L = {L}"
        default = f"the {conv.name} default {conv.default_ids} = {used} for {on}"
        out.append(f"no ids in the draft config: assumed trained on {default}")
    return tuple(out)


def _at(location: F.Location | None) -> str:
    return f" [{location}]" if location is not None else ""


def source_notes(chain: CaptureChain, engine_ids: list[int] | None, trained: list[int]) -> list[str]:
    """What compat says about a row whose ids do not reach a setter: why the draft's ids do
    not decide the layout, and for a serving-config engine which serving ids would serve the
    trained one."""
    production, key = chain.production, chain.source.key
    stated = production.decision
    outcome = stated.outcome if stated is not None else F.Outcome.UNKNOWN
    reason = f"{stated.reason}{_at(stated.location)}" if stated is not None else "the engine fills the ids itself"
    if production.kind is Production.SERVING_IDS:
        notes = [f"the engine reads no layer ids from the draft: it captures its serving config's {key} (b = id + 1), "
                 f"or the defaults applied{_at(production.default.location if production.default else None)}"]
        if outcome != F.Outcome.CAPTURES:
            return notes + [f"{str(outcome).replace('_', ' ')}: {reason}"]
        wanted = sorted(b - 1 for b in trained if b > 0)
        notes.append(f"to serve the trained layout set {key} = {{{', '.join(map(str, wanted))}}}")
        if 0 in trained:
            notes.append(
                "the trained embedding (b=0) cannot be requested from this engine: its ids are b - 1 and -1 is the"
                " post-final-norm state"
            )
        return notes
    given = f"the draft's ids {list(engine_ids)}" if engine_ids is not None else "the draft's ids"
    return [
        f"{given} are ignored (id transform {F.Transform.IGNORED}): {reason}; no draft config can change what it serves"
    ]


def _ids_elsewhere(draft: dict[str, object], conv: TrainingConvention, key: str | None, ids: list[int]) -> str:
    """Why a convention's default was used although the draft names ids: they sit under
    another convention's key (``--trained-with speculators`` on a SpecForge draft)."""
    detected = detect_training(draft, load_conventions())
    if detected.name != conv.name and key in detected.layer_id_keys:
        hint = (
            f", where {detected.name} drafts keep them: trained with {detected.name}? (without --trained-with,"
            f" {detected.name} is detected)"
        )
    else:
        hint = ": name the convention whose key that is with --trained-with"
    return f"its ids {ids} are under {key} (the engine reads them){hint}"


def trace_phase(project: Project, inputs: CompatInputs, engine_keys: tuple[str, ...]) -> Traced:
    info, row = inputs.info, inputs.row
    drafted = _draft_layers(project, inputs.draft)  # a runner computing default ids from the draft's layer count
    trace = trace_for_method(
        project, row, inputs.engine_ids, info.num_layers, info.hidden_size, inputs.target, draft_layers=drafted,
    )
    notes = list(inputs.notes)
    engine_ids, engine_key = inputs.engine_ids, inputs.engine_key
    engine_default = training_default = None
    if row.chain is not None and not row.chain.setter_driven:  # the engine serves its own layout or its serving ids
        notes.extend(source_notes(row.chain, engine_ids, inputs.trained))
        engine_ids = engine_key = None
    elif engine_ids is None:
        engine_default, training_default = _defaults(
            project, row, inputs.conv, info.num_layers, info.hidden_size, inputs.draft,
        )
        notes.append(f"the draft config has no ids under {' or '.join(engine_keys) or 'the keys the engine reads'}")
    return Traced(trace, engine_ids, engine_key, engine_default, training_default, tuple(notes))


def pair(inputs: CompatInputs, traced: Traced) -> Pairing:
    trace, trained = traced.trace, inputs.trained
    # On a delta stream the ids still pick boundaries (named_boundaries): paired slot by slot as
    # any layout, while judge adds that no slot holds the residual stream.
    named = trace.named_boundaries if outcome(trace) == "captures_deltas" else trace.boundaries
    served = list(named) if named is not None and outcome(trace) in ("captures", "captures_deltas") else None
    want = sorted(trained)  # engines concatenate in layer order, so training order is compared sorted
    paths = _id_paths(inputs.row, trace, inputs.draft_ids, traced.engine_ids, trained) if not inputs.given else []
    if served is None:
        slots = _path_differences(trace, paths, recorded=True) if outcome(trace) == "raises" else []
        return Pairing(None, want, paths, slots, numbered=True)
    slots = _path_differences(trace, paths) if paths else _slot_differences(trace, want, served)
    return Pairing(served, want, paths, slots, numbered=bool(paths) or len(want) == len(served))


@dataclass(frozen=True, slots=True)
class Judgement:
    """Phase 4: every difference (empty: MATCH), the notes that explain the verdict and the
    warnings about what went unchecked or looks wrong without deciding it."""

    differences: tuple[Difference, ...]
    notes: tuple[str, ...]
    warnings: tuple[str, ...] = ()


def judge(inputs: CompatInputs, traced: Traced, pairing: Pairing) -> Judgement:
    trace, served, want = traced.trace, pairing.served, pairing.want
    differences = [Difference(DifferenceKind.SLOT, slot=d, numbered=pairing.numbered) for d in pairing.slots]
    notes = list(traced.notes)
    hidden, target_hidden = inputs.info.hidden_size, inputs.target_hidden
    if served is None:
        differences.append(_no_service(trace))
    else:
        if want != inputs.trained:
            notes.append(f"draft ids are not in layer order; the engine concatenates in layer order {want}")
        if len(want) != len(served):
            differences.append(Difference(DifferenceKind.COUNT, expected=len(want), got=len(served), hidden=hidden))
        notes += [f"engine drops id {i}: {why}" for i, why in trace.dropped]
        if outcome(trace) == "captures_deltas":
            differences.append(Difference(DifferenceKind.DELTAS, reason=reason(trace)))
    if target_hidden is not None and hidden and target_hidden != hidden:
        differences.append(Difference(DifferenceKind.WIDTH, expected=target_hidden, got=hidden, hidden=hidden))
    more, ckpt_notes = _checkpoint_differences(inputs.checkpoint, hidden or target_hidden, len(inputs.trained), served)
    differences += more
    warnings = [w for w in (_hidden_size_warning(inputs.draft, hidden, len(inputs.trained)),) if w]
    if inputs.draft_dir is not None and inputs.checkpoint is None:
        warnings.append(_unchecked_weights(inputs.draft_dir))
    own = _draft_class_difference(inputs, hidden or target_hidden)
    if own is not None:
        differences.append(own)
    beyond = _beyond_target(inputs.trained, inputs.used, inputs.info.num_layers)
    if beyond:
        differences.insert(0, Difference(DifferenceKind.FIT, beyond=beyond, layers=inputs.info.num_layers))
    differences += _phase_differences(trace, want)
    warnings += [f"raises on {b.batches} (when the engine runs them): {b.how} [{b.at}]" for b in trace.batch_paths]
    return Judgement(tuple(differences), tuple(notes + ckpt_notes), tuple(warnings))


def _phase_differences(trace: TraceResult, want: list[int]) -> list[Difference]:
    """The phases of serving that record something else than the trained layout while the
    draft's ids do not (the runner holds other ids then: graphs captured with the defaults)."""
    out = []
    for p in trace.phases:
        if p.outcome == F.Outcome.CAPTURES and sorted(p.boundaries or ()) == want:
            continue
        if p.phase == "prefill" and p.outcome == trace.outcome and p.boundaries == trace.boundaries:
            continue  # the trace itself: already judged
        out.append(Difference(DifferenceKind.PHASE, phase=p, reason=p.reason, at=p.at))
    return out


def _draft_class_difference(inputs: CompatInputs, hidden: int | None) -> Difference | None:
    """The draft's fc against the engine's own draft class for it (the class registered under
    the draft config's architecture): a class that sizes its fc for a literal number of states
    cannot load a draft that concatenates another number, whatever the target captures."""
    archs = inputs.draft.get("architectures")
    project = inputs.row_project
    if project is None or not isinstance(archs, list):
        return None
    ckpt = inputs.checkpoint
    states = ckpt.slots(hidden) if ckpt is not None and hidden else None
    states = states or len(inputs.trained)
    for arch in (a for a in archs if isinstance(a, str)):
        row = project.row(arch)
        if row is None or not row.registered:
            continue
        fixed = fixed_state_count(project.lookup, row.qualname)
        if fixed is not None and fixed.states != states:
            return Difference(
                DifferenceKind.DRAFT_CLASS,
                reason=row.name,
                at=fixed.fc.location,
                expected=fixed.states,
                got=states,
                hidden=hidden,
            )
    return None


def _no_service(trace: TraceResult) -> Difference:
    """The difference when the engine serves nothing usable: undecided, raises, nothing, or
    layer outputs without the residual (no boundary a draft was trained on)."""
    if not decided(trace):
        return Difference(DifferenceKind.UNDECIDED, reason=reason(trace))
    said = outcome(trace)
    kind = (
        DifferenceKind.RAISES
        if said == "raises"
        else DifferenceKind.DELTAS if said == "captures_deltas" else DifferenceKind.NOTHING
    )
    return Difference(kind, reason=reason(trace), at=trace.raises_at)


@dataclass(frozen=True, slots=True)
class Advice:
    """Phase 5: the ids that would make the engine serve the trained layout, or why none can."""

    suggestions: tuple[Suggestion, ...]
    no_fix: str | None


def suggestions(
    project: Project, inputs: CompatInputs, traced: Traced, judgement: Judgement, engine_keys: tuple[str, ...]
) -> Advice:
    """On MISMATCH, the ids that would make the engine serve the trained layout; none when the
    draft itself says no ids can help (trained on a deeper target, weights contradicting its
    config, trained for another width)."""
    hidden = inputs.info.hidden_size or inputs.target_hidden
    beyond = any(d.kind == DifferenceKind.FIT for d in judgement.differences)
    weights_say = _contradicting_weights(inputs.checkpoint, hidden, len(inputs.trained))
    no_fix = _no_fix_reason(
        beyond,
        weights_say,
        len(inputs.trained),
        inputs.checkpoint,
        hidden,
        inputs.target_hidden,
        inputs.info.hidden_size,
    )
    phase = next((d.phase for d in judgement.differences if d.kind == DifferenceKind.PHASE), None)
    if no_fix is None and phase is not None:
        at = f" (at {phase.at})" if phase.at else ""
        no_fix = (
            f"no ids can: the runner holds other ids than the draft's in {phase.words}{at} whatever the draft says; "
            "the runner's code needs the change (`flowtrace fix` offers it where it can: FT026)"
        )
    own = next((d for d in judgement.differences if d.kind == DifferenceKind.DRAFT_CLASS), None)
    if own is not None and no_fix is None:
        no_fix = (
            f"the engine's draft class {own.reason} builds its fc for {own.expected} states ({own.at}) and this draft"
            f" has {own.got}: no ids change that; code change needed at that line (size the fc from the draft config)"
        )
    if not judgement.differences or no_fix is not None or _trained_for_another_target(inputs.checkpoint, hidden):
        return Advice((), no_fix)
    key = traced.engine_key or (engine_keys[0] if engine_keys else None)
    found = suggest(project, inputs.row, sorted(inputs.trained), inputs.info.num_layers, inputs.info.hidden_size, key)
    return Advice(tuple(_as_draft_ids(project, s) for s in found), no_fix)


def _as_draft_ids(project: Project, found: Suggestion) -> Suggestion:
    """A suggestion in the draft config's terms: the search finds the ids the setter must
    receive, and a method whose runner adds ``id_offset`` first needs that much less in the draft
    (vLLM adds 1 to a DFlash draft's ids, so setter ids [2, 9] are draft ids [1, 8])."""
    method = project.conv.method
    if method is None or method.default or not method.id_offset or found.ids is None or found.config != "draft config":
        return found
    shift, title = method.id_offset, method.title
    ids = tuple(i - shift for i in found.ids)
    why = f"the runner adds {shift} to the draft's {title} ids, so {list(ids)} reach the setter as {list(found.ids)}"
    why = f"{why}; {found.why}"
    return dataclasses.replace(found, ids=ids, why=why)


def compat(
    project: Project,
    target_config: str | Path,
    draft_config: str | Path,
    *,
    trained_with: str | None = None,
    engine_keys: tuple[str, ...] = (),
    trained_boundaries_given: list[int] | None = None,
) -> CompatResult:
    """One deployment's verdict: the five phases in order."""
    inputs = read_inputs(
        project,
        target_config,
        draft_config,
        trained_with=trained_with,
        engine_keys=engine_keys,
        trained_boundaries_given=trained_boundaries_given,
    )
    return verdict(project, inputs, engine_keys)


def catalogue_inputs(
    project: Project,
    entry: CatalogueDraft,
    catalogue: DraftCatalogue,
    target_config: str | Path | None,
    engine_keys: tuple[str, ...],
) -> CompatInputs:
    """Phase 1 for a catalogue draft (``compat --draft NAME``): its ids under its key, its
    convention (or its recorded training layout), and the target it was published for (the
    first of its architectures this tree registers, at its layer count) unless a target
    config is given."""
    answered = project.conv.method.name if project.conv.method is not None else EAGLE3
    if entry.method != answered:
        raise ConfigError(
            f"draft {entry.name!r} is a {entry.method} draft and this engine's profiles serve no method of that name"
            " (compat checks a draft under the method it was trained for)"
        )
    if target_config is not None:
        target, target_where = read_config(target_config, "target"), str(target_config)
    else:
        if entry.num_hidden_layers is None:
            raise ConfigError(
                f"draft {entry.name!r}: the catalogue does not know its target's layer count ({entry.unconfirmed});"
                " give --target-config"
            )
        arch = next((a for a in entry.architectures if project.row(a) is not None), entry.architectures[0])
        target = {"architectures": [arch], "num_hidden_layers": entry.num_hidden_layers}
        if entry.target_hidden_size:
            target["hidden_size"] = entry.target_hidden_size
        target_where = f"the catalogue's target of {entry.name} ({entry.target})"
    draft: dict[str, object] = {"architectures": list(entry.draft_architectures) or ["catalogue draft"]}
    if entry.ids is not None and entry.key:
        set_dotted(draft, entry.key, list(entry.ids))
    given = list(entry.trained_boundaries) if entry.trained_boundaries is not None else None
    return inputs_from(
        project,
        target,
        draft,
        target_where,
        f"catalogue draft {entry.name} ({entry.file})",
        trained_with=entry.convention,
        engine_keys=engine_keys,
        trained_boundaries_given=given,
        known_draft=True,
        convention_from=f"the catalogue entry {entry.name}",
    )


def set_dotted(doc: dict[str, object], dotted: str, value: object) -> None:
    """``doc[a][b] = value`` for ``"a.b"``, creating missing objects."""
    parts = dotted.split(".")
    current = doc
    for part in parts[:-1]:
        nxt = current.get(part)
        if not isinstance(nxt, dict):
            nxt = current[part] = {}
        current = nxt
    current[parts[-1]] = value


def verdict(project: Project, inputs: CompatInputs, engine_keys: tuple[str, ...]) -> CompatResult:
    """Phases 2 to 5 on phase 1's inputs."""
    traced = trace_phase(project, inputs, engine_keys)
    pairing = pair(inputs, traced)
    judgement = judge(inputs, traced, pairing)
    advice = suggestions(project, inputs, traced, judgement, engine_keys)
    return CompatResult(
        verdict="MATCH" if not judgement.differences else "MISMATCH",
        model=inputs.row.qualname,
        architecture=inputs.info.architecture,
        num_layers=inputs.info.num_layers,
        hidden_size=inputs.info.hidden_size,
        convention=inputs.convention_name,
        draft_ids=tuple(inputs.used) if inputs.used is not None else None,
        engine_ids=tuple(traced.engine_ids) if traced.engine_ids is not None else None,
        engine_key=traced.engine_key,
        trained=tuple(inputs.trained),
        served=tuple(pairing.served) if pairing.served is not None else None,
        differences=judgement.differences,
        notes=judgement.notes,
        trace=traced.trace,
        slots=tuple(pairing.slots),
        suggestions=advice.suggestions,
        checkpoint=inputs.checkpoint,
        engine_default=traced.engine_default,
        training_default=traced.training_default,
        id_paths=tuple(pairing.paths),
        warnings=judgement.warnings,
        no_fix=advice.no_fix,
        assumed=inputs.assumed,
        draft_ids_key=inputs.draft_ids_key,
    )

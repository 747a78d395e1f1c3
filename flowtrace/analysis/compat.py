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

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from flowtrace.analysis.layer_ids import CannotEvaluate, evaluate
from flowtrace.model import facts as F
from flowtrace.engines.profiles import ProfileError, rules_directory
from flowtrace.analysis.resolve import Project
from flowtrace.analysis.suggest import Suggestion, decided, deciding_setter, outcome, raises_at, reason, suggest, suggestion_json
from flowtrace.analysis.source_trace import source_notes, trace_model
from flowtrace.analysis.trace import TraceResult, describe_boundary
from flowtrace.sources.checkpoint import CheckpointError, DraftCheckpoint, checkpoint_json, read_draft_checkpoint, read_regular_file

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MEANINGS = ("layer_output", "boundary", "hf_index")
MAX_CONFIG_BYTES = 16 * 1024 * 1024  # a config.json is a few KB; a huge one is not a config


class ConfigError(Exception):
    """An unusable config file: one line naming the file and the problem (exit 2)."""


@dataclass(frozen=True, slots=True)
class TrainingConvention:
    name: str
    description: str
    layer_id_keys: tuple[str, ...]
    meaning: str
    default_ids: str
    detect_keys: tuple[str, ...]


def load_conventions(directory: Path | None = None) -> dict[str, TrainingConvention]:
    base = (directory or rules_directory()) / "training"
    out: dict[str, TrainingConvention] = {}
    for path in sorted(base.glob("*.toml")):
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))["training"]
            conv = TrainingConvention(
                name=data["name"],
                description=data["description"],
                layer_id_keys=tuple(data["layer_id_keys"]),
                meaning=data["meaning"],
                default_ids=data["default_ids"],
                detect_keys=tuple(data.get("detect_keys", ())),
            )
        except (OSError, KeyError, TypeError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ProfileError(f"{path}: invalid training profile ({type(exc).__name__}: {exc})") from None
        if conv.meaning not in MEANINGS:
            raise ProfileError(f"{path}: meaning must be one of {', '.join(MEANINGS)}, found {conv.meaning!r}")
        out[conv.name] = conv
    return out


def read_config(path: str | Path, role: str) -> dict:
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.exists() and not p.is_symlink():
        raise ConfigError(f"{p}: {role} config not found")
    try:
        text = read_regular_file(p, MAX_CONFIG_BYTES).decode("utf-8")
    except CheckpointError as exc:
        raise ConfigError(f"cannot read the {role} config: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: cannot read the {role} config ({exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{p}: the {role} config is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except RecursionError:
        raise ConfigError(f"{p}: the {role} config is nested too deeply to read") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: the {role} config must be a JSON object")
    return data


def lookup(data: dict, dotted: str):
    current: object = data
    for part in dotted.split("."):
        if not isinstance(current, dict) or part not in current:
            return None
        current = current[part]
    return current


@dataclass(frozen=True, slots=True)
class TargetInfo:
    architecture: str
    num_layers: int
    hidden_size: int | None


def target_info(config: dict, path: str) -> TargetInfo:
    archs = config.get("architectures")
    text_config = config.get("text_config")
    text: dict = text_config if isinstance(text_config, dict) else {}
    if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
        raise ConfigError(f"{path}: the target config has no 'architectures' list")
    layers = config.get("num_hidden_layers", text.get("num_hidden_layers"))
    hidden = config.get("hidden_size", text.get("hidden_size"))
    if not isinstance(layers, int) or isinstance(layers, bool) or layers <= 0:
        raise ConfigError(f"{path}: the target config has no positive integer 'num_hidden_layers' (also looked in text_config)")
    if layers > 100_000:
        raise ConfigError(f"{path}: the target config's num_hidden_layers = {layers} is implausible (at most 100000)")
    return TargetInfo(archs[0], layers, hidden if isinstance(hidden, int) else None)


def _ids(value, where: str) -> list[int] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ConfigError(f"{where}: layer ids must be a list of integers, found {value!r}")
    return list(value)


def detect_training(draft: dict, conventions: dict[str, TrainingConvention]) -> TrainingConvention:
    for conv in conventions.values():
        if conv.detect_keys and any(k in draft for k in conv.detect_keys):
            return conv
    return conventions.get("specforge") or next(iter(conventions.values()))


def trained_boundaries(conv: TrainingConvention, ids: list[int] | None, num_layers: int) -> tuple[list[int], list[str], list[int]]:
    """(boundaries, notes, used ids) the draft was trained on."""
    notes: list[str] = []
    if ids is None:
        try:
            ids = list(evaluate(conv.default_ids, {"L": num_layers}))  # type: ignore[arg-type, call-overload]
        except CannotEvaluate as exc:
            raise ConfigError(f"training profile {conv.name}: default_ids {conv.default_ids!r}: {exc}") from None
        notes.append(f"no ids in the draft config: {conv.name} default {conv.default_ids} = {ids}")
    out = []
    for i in ids:
        if conv.meaning == "layer_output":
            out.append(0 if i == -1 else i + 1)
        elif conv.meaning == "hf_index":
            if i == num_layers:
                notes.append(f"id {i} is HF hidden_states[{i}], the output after the final norm: no engine boundary equals it")
                out.append(-num_layers)  # sentinel: never equals a served boundary
            else:
                out.append(i % (num_layers + 1) if i < 0 else i)
        else:
            out.append(i)
    return out, notes, ids



@dataclass(frozen=True, slots=True)
class SlotDifference:
    """One slot where training and serving disagree, with the line that decides it."""

    slot: int
    trained: int | None
    served: int | None
    decided_at: str | None
    why: str


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
    differences: tuple[str, ...]
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

    @property
    def exit_code(self) -> int:
        return 0 if self.verdict == "MATCH" else 1


def _b(b: int, L: int) -> str:
    return "HF hidden_states[L] (after the final norm)" if b == -L else describe_boundary(b, L)


def parse_boundaries(text: str) -> list[int]:
    """``0,3,31`` -> [0, 3, 31] (``--trained-boundaries``)."""
    try:
        values = [int(x) for x in text.replace(" ", "").strip("[]").split(",") if x]
    except ValueError:
        raise ConfigError(f"--trained-boundaries must be comma-separated integers (boundaries, 0 = embedding), got {text!r}") from None
    if not values:
        raise ConfigError("--trained-boundaries names no boundary")
    return values


def _convention(draft: dict, trained_with: str | None) -> TrainingConvention:
    conventions = load_conventions()
    if trained_with:
        if trained_with not in conventions:
            raise ConfigError(f"unknown --trained-with {trained_with!r} (choose from {', '.join(sorted(conventions))})")
        return conventions[trained_with]
    return detect_training(draft, conventions)


def _first_ids(draft: dict, keys: tuple[str, ...], where: str) -> tuple[list[int] | None, str | None]:
    for key in keys:
        ids = _ids(lookup(draft, key), f"{where}: {key}")
        if ids is not None:
            return ids, key
    return None, None


def _dropped_steps(trace: TraceResult) -> list[tuple[int | None, str, str]]:
    """(capture index, file:line, text) of each id the capture site never records."""
    return [(step.index, str(step.location), step.text) for step in trace.steps if step.kind == "dropped" and step.location is not None]


def _setter_branch(trace: TraceResult) -> tuple[str | None, str]:
    """(file:line, why) of the write that set the capture indices, with the last branch
    decision before it when the trace records branch steps."""
    writes = [s for s in trace.steps if s.kind in ("setter", "builder", "default") and s.location is not None]
    if not writes:
        located = [s for s in trace.steps if s.location is not None]
        builder = next((s for s in located if s.kind == "builder"), None) or next((s for s in located if s.kind == "config"), None)
        if builder is not None:  # setter-less engines: the line that writes (or reads) the ids
            return str(builder.location), f"decided by the engine: {builder.text}"
        return None, "decided by the setter"
    write = writes[-1]
    position = trace.steps.index(write)
    branch = next((s for s in reversed(trace.steps[:position]) if s.kind == "branch"), None)
    what = write.text.split("  [")[0].split(": ", 1)[-1]
    if branch is not None:
        decision = branch.text.split(": ", 1)[-1]
        return str(write.location), f"{decision} [{branch.location}], so {what}"
    tag = write.text.split("  [")[-1].rstrip("]") if "  [" in write.text else ""
    who = "the setter" if write.kind == "setter" else "the engine's own layout:"  # builder / metadata default
    return str(write.location), f"{who} {what}" + (f" ({tag})" if tag else "")


def _path_differences(trace: TraceResult, paths: list[IdPath], L: int, verb: str = "served") -> list[SlotDifference]:
    """Slot by slot along each draft id's path: a shifted id cites the setter branch that
    mapped it, a dropped id the capture site that never records it."""
    setter_at, setter_why = _setter_branch(trace)
    drops = {index: (at, text) for index, at, text in _dropped_steps(trace)}
    out = []
    for k, p in enumerate(paths):
        if p.served == p.trained:
            continue
        at, why = drops.get(p.engine_index, (setter_at, setter_why)) if p.served is None else (setter_at, setter_why)
        served = _b(p.served, L) if p.served is not None else "nothing"
        out.append(SlotDifference(k, p.trained, p.served, at, f"trained on {_b(p.trained, L)}, {verb} {served} (draft id {p.draft_id} -> engine index {p.engine_index}) — {why}"))
    return out


def _slot_differences(trace: TraceResult, want: list[int], served: list[int], L: int) -> list[SlotDifference]:
    """What the fc receives that it was not trained on.

    Same count: slot by slot (the fc's inputs position by position), each citing the setter
    branch that produced the served boundary. Different counts: positions no longer line up,
    so each trained boundary the engine does not serve is listed with the dropped id's capture
    site, and each served boundary the draft was not trained on with the setter branch."""
    setter_at, setter_why = _setter_branch(trace)
    text = lambda a, b: f"trained on {_b(a, L) if a is not None else 'nothing'}, served {_b(b, L) if b is not None else 'nothing'}"  # noqa: E731
    if len(want) == len(served):
        return [SlotDifference(k, a, b, setter_at, f"{text(a, b)} — {setter_why}") for k, (a, b) in enumerate(zip(want, served)) if a != b]
    drops = iter([(at, text) for _, at, text in _dropped_steps(trace)])
    out = []
    for k, a in enumerate(want):
        if a not in served:
            at, why = next(drops, (setter_at, setter_why))
            out.append(SlotDifference(k, a, None, at, f"missing: {text(a, None)} — {why}"))
    for k, b in enumerate(served):
        if b not in want:
            out.append(SlotDifference(k, None, b, setter_at, f"extra: served {_b(b, L)} in engine slot {k}, trained on nothing there — {setter_why}"))
    return out


@dataclass(frozen=True, slots=True)
class IdPath:
    """One draft id followed through both sides: what training meant by it, what index the
    engine's setter made of it, and the boundary the loop records (None: not recorded)."""

    draft_id: int
    trained: int
    engine_index: int
    served: int | None


def _id_paths(row, trace: TraceResult, draft_ids: list[int] | None, engine_ids: list[int] | None, trained: list[int]) -> list[IdPath]:
    """Per id, when the engine reads the same ids training did and its setter maps them one
    to one (same count, no reordering by set/sort); otherwise [] (no pairing is honest).
    Also when the forward later raises: the paths say what the loop records before it does."""
    indices = trace.capture_indices
    if not draft_ids or draft_ids != engine_ids or indices is None or len(indices) != len(draft_ids) or not decided(trace):
        return []
    chain = row.chain  # the site link's capture point decides index -> boundary
    site = chain.site if chain is not None and chain.source.kind == F.SourceKind.SETTER else None
    if site is None or site.point not in (F.INPUT, F.OUTPUT):
        return []
    if sorted(indices) == list(indices) and sorted(draft_ids) != list(draft_ids):
        return []  # the setter sorted them: positions no longer pair
    offset = 0 if site.point == F.INPUT else 1
    dropped = {i for i, _ in trace.dropped}
    return [IdPath(i, b, idx, None if idx in dropped else idx + offset) for i, b, idx in zip(draft_ids, trained, indices)]


def _checkpoint_differences(ckpt: DraftCheckpoint | None, hidden: int | None, trained: int, served: list[int] | None) -> tuple[list[str], list[str]]:
    """(differences, notes) from the fc weight's width: against the target hidden size, the
    draft config's number of ids, and what the engine captures."""
    if ckpt is None:
        return [], []
    if ckpt.fc_in_features is None:
        return [], [f"checkpoint {ckpt.file}: no 2-D fc.weight among {ckpt.tensor_count} tensors (namings: {', '.join(ckpt.namings) or 'none recognised'})"]
    width, name = ckpt.fc_in_features, ckpt.fc_name
    if not hidden:
        return [], [f"checkpoint {ckpt.file}: {name} in_features {width}; the target hidden size is unknown"]
    slots = ckpt.slots(hidden)
    if slots is None:
        return [f"checkpoint: {name} in_features {width} is not a multiple of the target hidden size {hidden}: the draft was trained for another target"], []
    out = []
    if slots != trained:
        out.append(f"checkpoint: {name} {list(ckpt.fc_shape or ())} takes {slots} x {hidden}, but the draft config's layout names {trained} states")
    if served is not None and slots != len(served):
        out.append(f"checkpoint: {name} takes {slots} x {hidden} = {width}, the engine captures {len(served)} x {hidden} = {len(served) * hidden}")
    return out, [f"checkpoint {ckpt.file}: {name} {list(ckpt.fc_shape or ())} = {slots} x {hidden} (namings: {', '.join(ckpt.namings)})"]


WEIGHT_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".safetensors")


def _unchecked_weights(draft_dir: Path) -> str:
    """What a draft folder without a readable safetensors file leaves unchecked, and why."""
    found = sorted(p.name for p in draft_dir.iterdir() if p.suffix in WEIGHT_SUFFIXES)[:4] if draft_dir.is_dir() else []
    what = f"only {', '.join(found)}" if found else "no weight file"
    return (
        f"unchecked: {draft_dir} has {what}; flowtrace reads safetensors headers only (a .bin file is a pickle, never loaded), "
        "so the fc width was not checked against the draft config's ids"
    )


def _hidden_size_warning(draft: dict, hidden: int | None, states: int) -> str | None:
    """The draft's own hidden_size unlike the target's, with no target_hidden_size to say which
    width the fc takes: engines then size the fc input from the draft's hidden_size."""
    own = draft.get("hidden_size")
    if not isinstance(own, int) or isinstance(own, bool) or not hidden or own == hidden or "target_hidden_size" in draft:
        return None
    return (
        f"width: the draft's hidden_size {own} differs from the target's {hidden} and the draft config has no target_hidden_size: "
        f"engines then build the fc for {states} x {own} = {states * own} inputs, the target delivers {states} x {hidden} = {states * hidden}; "
        f"set target_hidden_size = {hidden} if the draft was trained on this target"
    )


def _beyond_target(trained: list[int], used: list[int] | None, L: int) -> str | None:
    """A trained boundary past the target's last layer: the draft was trained on a deeper model."""
    ids = used if used is not None and len(used) == len(trained) else trained
    beyond = [(i, b) for i, b in zip(ids, trained) if b > L]
    if not beyond:
        return None
    named = ", ".join(f"id {i} (b={b})" for i, b in beyond)
    return f"fit: this draft does not fit this target (L = {L}): {named} lies past the last layer's output b={L}"


def _contradicting_weights(ckpt: DraftCheckpoint | None, hidden: int | None, states: int) -> int | None:
    """The number of states the fc weight takes when it contradicts the draft config's count."""
    slots = ckpt.slots(hidden) if ckpt is not None and ckpt.fc_in_features is not None and hidden else None
    return slots if slots is not None and slots != states else None


def _trained_for_another_target(ckpt: DraftCheckpoint | None, hidden: int | None) -> bool:
    """The checkpoint's fc width is no multiple of the target's hidden size: no choice of ids
    can fix that, so compat suggests none (decided on the numbers, not on a message)."""
    return ckpt is not None and ckpt.fc_in_features is not None and bool(hidden) and ckpt.slots(hidden) is None


def _defaults(project: Project, row, conv: TrainingConvention, L: int, hidden: int | None) -> tuple[str, str]:
    """(engine default, training default) for a draft config without ids."""
    fallback = trace_model(project, row, None, L, hidden)
    if outcome(fallback) == "captures" and fallback.boundaries is not None:
        source = next((s for s in fallback.steps if s.kind == "config" and s.location is not None), None)
        at, _ = deciding_setter(fallback)
        where = f" ({source.text} at {source.location})" if source else (f" (setter at {at})" if at else "")
        engine = f"the engine falls back to its default: boundaries {list(fallback.boundaries)}{where}"
    else:
        engine = f"the engine has no usable default: {reason(fallback) or outcome(fallback)}"
    boundaries, _, used = trained_boundaries(conv, None, L)
    training = f"the {conv.name} training default {conv.default_ids} = ids {used} -> boundaries {boundaries}"
    return engine, training


def compat(
    project: Project,
    target_config: str | Path,
    draft_config: str | Path,
    *,
    trained_with: str | None = None,
    engine_keys: tuple[str, ...] = (),
    trained_boundaries_given: list[int] | None = None,
) -> CompatResult:
    target = read_config(target_config, "target")
    draft = read_config(draft_config, "draft")
    info = target_info(target, str(target_config))
    L = info.num_layers
    conv = _convention(draft, trained_with)
    draft_ids, _ = _first_ids(draft, conv.layer_id_keys, str(draft_config))
    engine_ids, engine_key = _first_ids(draft, engine_keys, str(draft_config))
    row = project.row(info.architecture)
    if row is None:
        raise ConfigError(f"{target_config}: architecture {info.architecture!r} is not registered in this engine tree (no model class found)")
    checkpoint = read_draft_checkpoint(draft_config) if Path(draft_config).is_dir() else None
    trace = trace_model(project, row, engine_ids, L, info.hidden_size, target)
    if trained_boundaries_given is not None:
        bad = [b for b in trained_boundaries_given if not 0 <= b <= L]
        if bad:
            raise ConfigError(f"--trained-boundaries {bad} outside 0..{L} (0 = embedding, {L} = last layer's output)")
        trained, notes, used = list(trained_boundaries_given), ["training layout given by --trained-boundaries (the draft config's ids are not converted)"], draft_ids
        convention_name = "given"
    else:
        trained, notes, used = trained_boundaries(conv, draft_ids, L)
        convention_name = conv.name
    notes = list(notes)
    engine_default = training_default = None
    if row.source is not None:  # no setter: the engine serves its own layout (source_trace)
        notes.extend(source_notes(row, engine_ids, trained))
        engine_ids = engine_key = None
    elif engine_ids is None:
        engine_default, training_default = _defaults(project, row, conv, L, info.hidden_size)
        notes.append(f"the draft config has no ids under {' or '.join(engine_keys) or 'the keys the engine reads'}")
    differences: list[str] = []
    slots: list[SlotDifference] = []
    served = list(trace.boundaries) if trace.boundaries is not None and outcome(trace) == "captures" else None
    want = sorted(trained)  # engines concatenate in layer order, so training order is compared sorted
    paths = _id_paths(row, trace, draft_ids, engine_ids, trained) if trained_boundaries_given is None else []
    if served is None:
        where = raises_at(trace)
        slots = _path_differences(trace, paths, L, "the loop records") if outcome(trace) == "raises" else []
        differences += [f"slot {d.slot}: {d.why}" + (f"  [{d.decided_at}]" if d.decided_at else "") for d in slots]
        if not decided(trace):
            differences.append(f"undecided: flowtrace cannot decide what the engine captures: {reason(trace) or 'capture path undecidable'} (not a verdict on the engine; see `flowtrace trace`)")
        else:
            differences.append(f"the engine {'raises' if outcome(trace) == 'raises' else 'captures nothing usable'}: {reason(trace) or 'no boundary recorded'}{f' (at {where})' if where else ''}")
    else:
        if want != trained:
            notes.append(f"draft ids are not in layer order; the engine concatenates in layer order {want}")
        slots = _path_differences(trace, paths, L) if paths else _slot_differences(trace, want, served, L)
        differences += [(f"slot {d.slot}: {d.why}" if paths or len(want) == len(served) else d.why) + (f"  [{d.decided_at}]" if d.decided_at else "") for d in slots]
        if len(want) != len(served):
            differences.append(f"count: the draft's fc expects {len(want)} x {info.hidden_size or 'hidden'}, the engine captures {len(served)}")
        notes += [f"engine drops id {i}: {why}" for i, why in trace.dropped]
    target_hidden = draft.get("target_hidden_size")
    if isinstance(target_hidden, int) and info.hidden_size and target_hidden != info.hidden_size:
        differences.append(f"width: the draft was trained for target_hidden_size {target_hidden}, the target's hidden_size is {info.hidden_size}")
    fc_hidden = info.hidden_size or (target_hidden if isinstance(target_hidden, int) else None)
    more, ckpt_notes = _checkpoint_differences(checkpoint, fc_hidden, len(trained), served)
    differences += more
    notes += ckpt_notes
    warnings = [w for w in (_hidden_size_warning(draft, info.hidden_size, len(trained)),) if w]
    if Path(draft_config).is_dir() and checkpoint is None:
        warnings.append(_unchecked_weights(Path(draft_config)))
    beyond = _beyond_target(trained, used, L)
    if beyond:
        differences.insert(0, beyond)
    weights_say = _contradicting_weights(checkpoint, fc_hidden, len(trained))
    no_fix = _no_fix_reason(beyond, weights_say, len(trained), checkpoint, fc_hidden, target_hidden, info.hidden_size)
    suggestions: tuple[Suggestion, ...] = ()
    if differences and no_fix is None and not _trained_for_another_target(checkpoint, fc_hidden):
        suggestions = suggest(project, row, want, L, info.hidden_size, engine_key or (engine_keys[0] if engine_keys else None))
    return CompatResult(
        verdict="MATCH" if not differences else "MISMATCH",
        model=row.qualname,
        architecture=info.architecture,
        num_layers=L,
        hidden_size=info.hidden_size,
        convention=convention_name,
        draft_ids=tuple(used) if used is not None else None,
        engine_ids=tuple(engine_ids) if engine_ids is not None else None,
        engine_key=engine_key,
        trained=tuple(trained),
        served=tuple(served) if served is not None else None,
        differences=tuple(differences),
        notes=tuple(notes),
        trace=trace,
        slots=tuple(slots),
        suggestions=suggestions,
        checkpoint=checkpoint,
        engine_default=engine_default,
        training_default=training_default,
        id_paths=tuple(paths),
        warnings=tuple(warnings),
        no_fix=no_fix,
    )


def _no_fix_reason(beyond: str | None, weights_say: int | None, states: int, ckpt: DraftCheckpoint | None, hidden: int | None, target_hidden: object, target: int | None) -> str | None:
    """Why changing the ids cannot help: no fix is offered that the draft itself contradicts."""
    if beyond:
        return "the draft was trained on a deeper target; no ids or engine change make this target serve those layers: use a draft trained for this target"
    if weights_say is not None and ckpt is not None:
        return (
            f"the weights contradict the draft config: {ckpt.fc_name} {list(ckpt.fc_shape or ())} takes {weights_say} x {hidden}, the config names {states} ids; "
            f"find the {weights_say} layers the draft was trained on (its training config) before changing any ids"
        )
    if isinstance(target_hidden, int) and target and target_hidden != target:
        return f"the draft was trained for a target of hidden size {target_hidden}, not {target}: no ids fix a width"
    return None


def compat_json(result: CompatResult) -> dict:
    from flowtrace.analysis.trace import trace_json

    return {
        "schema": "flowtrace.compat/1",
        "verdict": result.verdict,
        "model": result.model,
        "architecture": result.architecture,
        "num_layers": result.num_layers,
        "hidden_size": result.hidden_size,
        "trained_with": result.convention,
        "draft_ids": list(result.draft_ids) if result.draft_ids is not None else None,
        "engine_ids": list(result.engine_ids) if result.engine_ids is not None else None,
        "engine_key": result.engine_key,
        "trained_boundaries": list(result.trained),
        "served_boundaries": list(result.served) if result.served is not None else None,
        "outcome": outcome(result.trace),
        "differences": list(result.differences),
        "slots": [{"slot": d.slot, "trained": d.trained, "served": d.served, "decided_at": d.decided_at, "why": d.why} for d in result.slots],
        "id_paths": [{"draft_id": p.draft_id, "trained": p.trained, "engine_index": p.engine_index, "served": p.served} for p in result.id_paths],
        "suggestions": [suggestion_json(s) for s in result.suggestions],
        "engine_default": result.engine_default,
        "training_default": result.training_default,
        "draft_checkpoint": checkpoint_json(result.checkpoint, result.hidden_size) if result.checkpoint is not None else None,
        "notes": list(result.notes),
        "warnings": list(result.warnings),
        "no_fix": result.no_fix,
        "trace": trace_json(result.trace),
    }

"""Does this draft match what this engine will feed it? One deployment, one verdict.

Reads the target's ``config.json`` (architecture, layer count, hidden size; nested
``text_config`` for multimodal targets) and the draft's (layer ids wherever the formats put
them, ``target_hidden_size``), resolves the architecture through the engine's registry,
traces what the engine serves, converts the draft's ids to the boundaries it was trained on
under a training convention (``rules/training/*.toml``), and compares slot by slot.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from flowtrace.analysis.layer_ids import CannotEvaluate, evaluate
from flowtrace.engines.profiles import ProfileError, rules_directory
from flowtrace.analysis.resolve import Project
from flowtrace.analysis.source_trace import source_notes, trace_model
from flowtrace.analysis.trace import TraceResult, describe_boundary

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MEANINGS = ("layer_output", "boundary", "hf_index")


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
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{p}: {role} config not found") from None
    except (OSError, UnicodeDecodeError) as exc:
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
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
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
            ids = list(evaluate(conv.default_ids, {"L": num_layers}))  # type: ignore[arg-type]
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

    @property
    def exit_code(self) -> int:
        return 0 if self.verdict == "MATCH" else 1


def _b(b: int, L: int) -> str:
    return "HF hidden_states[L] (after the final norm)" if b == -L else describe_boundary(b, L)


def compat(project: Project, target_config: str | Path, draft_config: str | Path, *, trained_with: str | None = None, engine_keys: tuple[str, ...] = ()) -> CompatResult:
    target = read_config(target_config, "target")
    draft = read_config(draft_config, "draft")
    info = target_info(target, str(target_config))
    conventions = load_conventions()
    if trained_with:
        if trained_with not in conventions:
            raise ConfigError(f"unknown --trained-with {trained_with!r} (choose from {', '.join(sorted(conventions))})")
        conv = conventions[trained_with]
    else:
        conv = detect_training(draft, conventions)
    draft_ids = None
    for key in conv.layer_id_keys:
        draft_ids = _ids(lookup(draft, key), f"{draft_config}: {key}")
        if draft_ids is not None:
            break
    engine_ids = engine_key = None
    for key in engine_keys:
        engine_ids = _ids(lookup(draft, key), f"{draft_config}: {key}")
        if engine_ids is not None:
            engine_key = key
            break
    row = project.row(info.architecture)
    if row is None:
        raise ConfigError(f"{target_config}: architecture {info.architecture!r} is not registered in this engine tree (no model class found)")
    trace = trace_model(project, row, engine_ids, info.num_layers, info.hidden_size)
    trained, notes, used = trained_boundaries(conv, draft_ids, info.num_layers)
    notes = list(notes)
    if row.source is not None:
        notes.extend(source_notes(row, engine_ids, trained))
        engine_ids = engine_key = None  # read by nobody: the engine serves its own layout
    elif engine_ids is None:
        notes.append("the engine finds no ids in the draft config and uses its own default")
    differences: list[str] = []
    served = list(trace.boundaries) if trace.boundaries is not None else None
    L = info.num_layers
    if served is None:
        differences.append("the engine captures nothing usable: " + "; ".join(trace.problems or ("capture path undecidable",)))
    else:
        want = sorted(trained)  # engines concatenate in layer order, so training order is compared sorted
        if want != trained:
            notes.append(f"draft ids are not in layer order; the engine concatenates in layer order {sorted(trained)}")
        for slot in range(max(len(want), len(served))):
            a = want[slot] if slot < len(want) else None
            b = served[slot] if slot < len(served) else None
            if a != b:
                trained_text = _b(a, L) if a is not None else "nothing"
                served_text = _b(b, L) if b is not None else "nothing"
                differences.append(f"slot {slot}: trained on {trained_text}, served {served_text}")
        if len(want) != len(served):
            hidden = info.hidden_size or "hidden"
            differences.append(f"count: the draft's fc expects {len(want)} x {hidden}, the engine captures {len(served)}")
        for i, why in trace.dropped:
            notes.append(f"engine drops id {i}: {why}")
    target_hidden = draft.get("target_hidden_size")
    if isinstance(target_hidden, int) and info.hidden_size and target_hidden != info.hidden_size:
        differences.append(f"width: the draft was trained for target_hidden_size {target_hidden}, the target's hidden_size is {info.hidden_size}")
    return CompatResult(
        verdict="MATCH" if not differences else "MISMATCH",
        model=row.qualname,
        architecture=info.architecture,
        num_layers=L,
        hidden_size=info.hidden_size,
        convention=conv.name,
        draft_ids=tuple(used),
        engine_ids=tuple(engine_ids) if engine_ids is not None else None,
        engine_key=engine_key,
        trained=tuple(trained),
        served=tuple(served) if served is not None else None,
        differences=tuple(differences),
        notes=tuple(notes),
        trace=trace,
    )


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
        "differences": list(result.differences),
        "notes": list(result.notes),
        "trace": trace_json(result.trace),
    }


def compat_text(result: CompatResult) -> str:
    L = result.num_layers
    lines = [
        f"{result.verdict}: {result.architecture} -> {result.model} (L = {L}, hidden {result.hidden_size})",
        f"  draft trained ({result.convention}): ids {list(result.draft_ids or ())} -> boundaries {list(result.trained)}",
        f"  engine reads: {result.engine_key or 'no ids (default)'} = {list(result.engine_ids) if result.engine_ids is not None else 'default'}"
        f" -> serves boundaries {list(result.served) if result.served is not None else 'none'}",
    ]
    lines += [f"  - {d}" for d in result.differences]
    lines += [f"  note: {n}" for n in result.notes]
    return "\n".join(lines) + "\n"

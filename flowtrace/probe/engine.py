"""``flowtrace probe engine``: the installed engine itself at runtime, against the static trace of its source.

The engine lives in its own venv (``flowtrace probe engine --install``: the profile's install script) and is never a
flowtrace dependency: this module runs that venv's python on :mod:`flowtrace.probe.engine_runner` in a
subprocess, handing it the engine profile's ``[probe]`` settings (:mod:`flowtrace.probe.settings`:
which package, which runner script, which environment), reads back plain JSON, then scans the same venv's installed
engine source with flowtrace's static analysis and compares the two slot by slot. Keeping the engine out of this
process means flowtrace's torch pin and the engine's never meet, and a crash in the engine is an
observation, not a flowtrace traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypedDict

from flowtrace.probe import engine_runner as runner
from flowtrace.probe.engine_runner import CaseRecord, CaseSpec, RunnerResult, Shrink
from flowtrace.probe.errors import ProbeError
from flowtrace.probe.settings import ProbeSettings, probe_settings

SCHEMA = "flowtrace.probe-engine/1"
DEFAULT_NUM_LAYERS = 4
FC_SLOTS_WITHOUT_IDS = 3  # an EAGLE-3 draft is trained on three states unless its weights say otherwise
# (a method's [methods.*] states / states_key say otherwise for its drafts)


@dataclass(frozen=True, slots=True)
class EngineEnv:
    """An engine venv checked to hold the expected engine build."""

    python: str
    distribution: str
    version: str
    source: str  # the installed engine package folder the static trace scans


@dataclass(frozen=True, slots=True)
class Case:
    """One request to probe: how the ids reach the engine and what the draft's fc expects."""

    name: str
    mode: str  # "draft": through the draft config and the engine's plumbing; "direct": the engine's setter
    ids: tuple[int, ...] | None
    key: str | None = None  # the draft-config key of the ids (None: the profile's draft_ids_key)
    fc_slots: int = FC_SLOTS_WITHOUT_IDS
    draft_layers: int = 1  # decoder layers of the probe's draft (a layout with a layer stack writes that many)

    def to_spec(self) -> CaseSpec:
        return {"name": self.name, "mode": self.mode, "ids": list(self.ids) if self.ids is not None else None,
                "key": self.key, "fc_slots": self.fc_slots, "draft_layers": self.draft_layers}


class EngineRun(RunnerResult, total=False):
    """The runner's answers of every engine process of one probe, merged, and what flowtrace adds."""

    processes: int
    method: str | None  # the probed method (None: the profile's default)
    hidden_size: int | None  # the shrunk target's


class StaticCase(TypedDict, total=False):
    """flowtrace's static trace of the installed engine for one case (the trace JSON's fields)."""

    outcome: str
    boundaries: list[int] | None
    raises_at: str | None
    reason: str | None
    at: str | None  # file:line of the capture point the trace names
    fc_in_features: int | None
    slots: list[dict[str, Any]] | None  # the trace JSON's slots (boundary or layer_value_of each)


class StaticDoc(TypedDict):
    """The static trace as the document reports it: every field, None where the trace has none."""

    boundaries: list[int] | None
    outcome: str | None
    raises_at: str | None
    reason: str | None
    at: str | None
    fc_in_features: int | None
    slots: list[dict[str, Any]] | None


class ObservedSlot(TypedDict):
    boundary: int | None
    rel_err: float | None
    layer_value_of: int | None


class ObservedFcInput(TypedDict):
    width: int | None
    expected: int | None  # fc_slots x hidden size (None: hidden size unknown)
    matches: bool | None
    slots: list[int | None]


class ObservedCase(TypedDict):
    """What the engine did in one case, as the document reports it."""

    outcome: str
    slots: list[ObservedSlot]
    raised_at: str | None
    raised_through: list[str] | None
    message: str | None
    engine_layers: Any  # as the runner script reported it
    plumbing: str | None
    fc_input: ObservedFcInput | None
    after_raise: bool


class SlotComparison(TypedDict):
    slot: int
    observed: int | None
    static: int | None
    agree: bool
    static_at: str | None


class _EngineDocument(TypedDict):
    schema: str
    engine: str
    method: str | None
    engine_version: str
    engine_distribution: str
    engine_source: str
    architecture: str | None
    model_class: str | None
    num_layers: int | None
    case: str
    mode: str
    layer_ids: list[int] | None
    observed: ObservedCase
    static: StaticDoc
    slots: list[SlotComparison]
    agree: bool
    shrunk: list[Shrink]
    seconds: float
    peak_rss_mb: float
    engine_processes: int


class EngineDocument(_EngineDocument, total=False):
    """The ``flowtrace.probe-engine/1`` document of one case (written to a file, read back by
    ``flowtrace report --probe-engine`` and ``probe merge``)."""

    seconds_total: float


@dataclass(frozen=True, slots=True)
class EngineProbeResult:
    """One case's runtime observation next to the static trace (the ``flowtrace.probe-engine/1`` document)."""

    doc: EngineDocument

    @property
    def agree(self) -> bool:
        return bool(self.doc.get("agree"))

    @property
    def exit_code(self) -> int:
        return 0 if self.agree else 1

    def to_json(self) -> str:
        return json.dumps(self.doc, indent=2)


def default_venv(settings: ProbeSettings, device: str) -> Path:
    """Where the install script puts the engine venv unless told otherwise."""
    env = os.environ.get("FLOWTRACE_ENGINE_VENV")
    if env:
        return Path(env)
    build = settings.build(device)
    dist, version = build.distribution, build.version
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "flowtrace" / "engines" / f"{dist}-{version or 'latest'}"


def install_command(settings: ProbeSettings, device: str) -> str:
    """The command that builds the engine venv, as the error lines say it."""
    return f"flowtrace probe engine --install --engine {settings.engine}" + (
        f" --device {device}" if device != "cpu" else ""
    )


def install_engine(settings: ProbeSettings, device: str, engine_python: str | None = None) -> Path:
    """Build (or keep) the engine venv with the profile's install script (``[probe] install``,
    shipped next to the profile, so an installed flowtrace has it); returns the venv's python.
    The script gets the venv folder, the device and that device's build; its output goes to
    the caller's stderr as it runs. Engine-neutral: what to install is the profile's."""
    build = settings.build(device)
    if settings.install is None:
        raise ProbeError(f"the {settings.engine} profile's [probe] table names no install script: install "
                         f"{build.distribution}{'==' + build.version if build.version else ''} into a venv of its own "
                         "and pass its python with --engine-python (see docs/probe-engine.md)")
    venv = Path(engine_python).parent.parent if engine_python else default_venv(settings, device)
    spec = f"{build.distribution}=={build.version}" if build.version else build.distribution
    env = {
        **os.environ,
        "FLOWTRACE_ENGINE_VENV": str(venv),
        "FLOWTRACE_ENGINE_DEVICE": device,
        "FLOWTRACE_ENGINE_BUILD": spec,
    }
    try:
        with subprocess.Popen(
            ["bash", str(settings.install)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ) as proc:  # noqa: S603 - our own shipped script
            for line in proc.stdout or ():  # stdout holds only the command's output: the script's goes to stderr
                sys.stderr.write(line)
                sys.stderr.flush()
        code = proc.returncode
    except OSError as exc:
        raise ProbeError(f"cannot run {settings.install}: {exc.strerror or exc} (it needs bash)") from None
    if code != 0:
        raise ProbeError(f"{settings.install} failed (exit {code}) installing {spec} into {venv}: see its output above")
    return venv / "bin" / "python"


def locate_engine(settings: ProbeSettings, device: str, engine_python: str | None) -> EngineEnv:
    """The engine venv's python, its engine version and source folder, or one clear usage error."""
    build = settings.build(device)
    dist, want = build.distribution, build.version
    python = engine_python or str(default_venv(settings, device) / "bin" / "python")
    if not os.path.exists(python):
        raise ProbeError(f"no engine venv at {python}: run {install_command(settings, device)} "
                         "(or pass --engine-python / set FLOWTRACE_ENGINE_VENV); see docs/probe-engine.md")
    try:
        out = subprocess.run(
            [python, "-I", runner.__file__, "--about", settings.package, dist],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        about = json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError, IndexError):
        raise ProbeError(f"{python} did not answer as a python interpreter of an engine venv") from None
    if not about.get("version"):
        raise ProbeError(f"{python}: {dist} is not installed in that venv; run {install_command(settings, device)}")
    if want and about["version"] != want:
        raise ProbeError(
            f"{python}: {dist} {about['version']} installed, the probe needs {dist}=={want}; run"
            f" {install_command(settings, device)}"
        )
    if not about.get("source"):
        raise ProbeError(f"{python}: the {settings.package} package folder was not found in that venv")
    return EngineEnv(python, dist, about["version"], about["source"])


def read_json(path: str | os.PathLike[str], what: str) -> dict[str, Any]:
    """A target or draft config (file or folder), read by the one config reader
    (flowtrace.sources.configs); its errors become probe errors."""
    from flowtrace.sources.configs import ConfigError, read_config

    try:
        return read_config(path, what)
    except ConfigError as exc:
        raise ProbeError(str(exc)) from None


def _dotted(doc: dict[str, Any], key: str) -> object:
    """The value at a dotted key of a JSON object (None when any part is missing)."""
    value: object = doc
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def draft_case(path: str, name: str = "draft", settings: ProbeSettings | None = None) -> Case:
    """The case a draft config describes: its ids exactly as written (or none), read at the
    profile's draft-config keys in the engine's order (those of the settings' method), its fc
    width and its layer count."""
    doc = read_json(path, "--draft-config")
    settings = settings or probe_settings()
    ids, key = None, settings.draft_ids_key
    for k in settings.id_keys:
        if _dotted(doc, k) is not None:
            ids, key = _dotted(doc, k), k
            break
    if ids is not None and not (
        isinstance(ids, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in ids)
    ):
        raise ProbeError(f"--draft-config {path}: {key} must be a list of integers, got {ids!r}")
    layers = doc.get("num_hidden_layers")
    layers = layers if type(layers) is int and layers > 0 else 1
    slots = _fc_slots_from_weights(Path(path)) or (len(set(ids)) if ids else _states_without_ids(doc, settings))
    return Case(name, "draft", tuple(ids) if ids is not None else None, key, slots, layers)


def _states_without_ids(doc: dict[str, Any], settings: ProbeSettings) -> int:
    """How many states the method's fc takes for a draft that names no ids: the method's number,
    else the draft-config key it names (vLLM's DFlash draft: one per draft layer), else three."""
    if settings.states:
        return settings.states
    value = _dotted(doc, settings.states_key) if settings.states_key else None
    return value if type(value) is int and value > 0 else FC_SLOTS_WITHOUT_IDS


def _fc_slots_from_weights(path: Path) -> int | None:
    """fc in_features / out_features from a draft folder's safetensors header (read without torch)."""
    folder = path if path.is_dir() else path.parent
    for f in sorted(folder.glob("*.safetensors")):
        try:
            with f.open("rb") as fh:
                n = int.from_bytes(fh.read(8), "little")
                header = json.loads(fh.read(min(n, 50_000_000)))
        except (OSError, ValueError):
            continue
        for name, meta in header.items():
            if name.endswith("fc.weight") and isinstance(meta, dict) and len(meta.get("shape", [])) == 2:
                out_f, in_f = meta["shape"]
                return in_f // out_f if out_f and in_f % out_f == 0 else None
    return None


def parse_layer_ids(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ProbeError(f"--layer-ids {text!r}: expected comma-separated integers") from None


def run_engine(
    env: EngineEnv,
    settings: ProbeSettings,
    target: dict[str, Any],
    cases: Sequence[Case],
    num_layers: int | None,
    device: str,
    timeout: float = 900.0,
    progress: Callable[[str], None] | None = None,
) -> RunnerResult:
    """Run the runner in the engine venv for every case (one engine process) and return its JSON."""
    with tempfile.TemporaryDirectory(prefix="flowtrace-engine-") as tmp:
        spec: runner.RunnerSpec = {"target_config": target, "num_layers": num_layers, "device": device, "workdir": tmp,
                "cases": [c.to_spec() for c in cases], "seed": 0, "probe": settings.to_spec(device)}
        spec_path, out_path = Path(tmp, "spec.json"), Path(tmp, "out.json")
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        if progress:
            progress(f"starting {env.distribution} {env.version} in {env.python}")
        proc = subprocess.run([env.python, "-I", runner.__file__, str(spec_path), str(out_path)],
                              capture_output=True, text=True, timeout=timeout, check=False,
                              env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
        if not out_path.exists():
            tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
            raise ProbeError(f"the engine process ended (exit {proc.returncode}) without a result: {tail}")
        result: RunnerResult = json.loads(out_path.read_text(encoding="utf-8"))  # the runner's JSON answer
        return result


def run_all(env: EngineEnv, settings: ProbeSettings, target: dict[str, Any], cases: Sequence[Case], num_layers: int,
            device: str, progress: Callable[[str], None] | None = None) -> EngineRun:
    """All cases, in as few engine processes as the engine allows.

    A raise inside an engine step leaves the in-process engine core dead, so the runner stops there
    and the cases after it run in a fresh process: order cases that may raise last."""
    raw: EngineRun = {}
    pending = list(cases)
    while pending:
        part = run_engine(env, settings, target, pending, num_layers, device, progress=progress)
        if part.get("fatal_error") or part.get("build_error"):
            raise ProbeError(f"the engine run failed: {part.get('fatal_error') or part.get('build_error')}")
        if not raw:
            raw = {**part, "cases": [], "processes": 0, "seconds": 0.0, "peak_rss_mb": 0.0, "method": None,
                   "hidden_size": None}  # method and hidden size: set by probe_engine
        raw["processes"] += 1
        raw["seconds"] += float(part.get("seconds") or 0.0)
        raw["peak_rss_mb"] = max(raw["peak_rss_mb"], float(part.get("peak_rss_mb") or 0.0))
        done = [c for c in part.get("cases", []) if c.get("outcome") != "not_run"]
        raw["cases"].extend(done)
        if part.get("start_error") or not done:
            break
        names = {c["name"] for c in done}
        pending = [c for c in pending if c.name not in names]
    return raw


def static_traces(source: str, architecture: str, cases: Sequence[Case], num_layers: int, hidden_size: int | None,
                  target: dict[str, Any], method: str | None = None) -> list[StaticCase]:
    """flowtrace's static trace of the installed engine's own source, one per case, for the
    speculative method the draft is (None: the profiles' default, as `flowtrace trace` without
    ``--method``)."""
    from flowtrace import api
    from flowtrace.analysis.trace import trace_json
    from flowtrace.index.build import IndexOptions

    # Scan the folder that holds the package, with everything else excluded: the engine's
    # absolute imports (``from <package>.models.llama import ...``) then resolve inside the tree,
    # and its profile is chosen by path, as for any checkout (rooted at the package folder
    # itself, ``<package>.`` prefixes name no module of the tree). Paths read ``<package>/...``.
    package = Path(source).name
    result = api.scan(Path(source).parent, options=IndexOptions(excludes=("/*", f"!/{package}/")), method=method)

    def where(step: dict[str, Any]) -> str:
        return f"{step['file']}:{step['line']}"

    out: list[StaticCase] = []
    for c in cases:
        try:
            ids = list(c.ids) if c.ids is not None else None
            traced = api.trace(result, architecture, ids, num_layers, hidden_size, target, draft_layers=c.draft_layers)
        except api.UsageError as exc:
            out.append({"outcome": "unknown", "boundaries": None, "raises_at": None, "reason": str(exc), "at": None})
            continue
        doc = trace_json(traced)
        at = next((where(s) for s in doc["steps"] if s["kind"] == "point" and s["file"]), None)
        at = at or next((where(s) for s in doc["steps"] if s["file"]), None)
        raises_at = doc["raises_at"] or None
        out.append(
            {
                "outcome": doc["outcome"],
                "boundaries": doc["boundaries"],
                "raises_at": raises_at,
                "reason": doc["reason"],
                "at": at,
                "fc_in_features": doc["fc_in_features"],
                "slots": doc.get("slots"),
            }
        )
    return out


def observed_outcome(case: CaseRecord) -> str:
    """captures / raises / captures_nothing / captures_deltas / unmatched / not_run, from the
    runner's record (captures_deltas: every state is a boundary or what a layer returns first)."""
    if case.get("outcome") in ("raises", "not_run"):
        return case["outcome"]
    slots = case.get("slots") or []
    if not slots:
        return "captures_nothing"
    if all(s["boundary"] is not None for s in slots):
        return "captures"
    if all(s["boundary"] is not None or s.get("layer_value_of") is not None for s in slots):
        return "captures_deltas"
    return "unmatched"


def _slot_key(slot: runner.SlotRecord | dict[str, Any]) -> tuple[int | None, int | None]:
    """A state as (boundary, layer whose first output it is): one of the two is set."""
    return slot.get("boundary"), slot.get("layer_value_of") if slot.get("boundary") is None else None


def compare(raw: EngineRun, case: CaseRecord, static: StaticCase) -> tuple[bool, list[SlotComparison]]:
    """Per slot agree/disagree, and the whole verdict (outcome and boundaries both)."""
    outcome = observed_outcome(case)
    if outcome == "captures_deltas" or static.get("outcome") == "captures_deltas":
        return _compare_deltas(outcome, case, static)
    seen = [s.get("boundary") for s in case.get("slots") or []]
    want = list(static.get("boundaries") or [])
    n = max(len(seen), len(want))
    slots: list[SlotComparison] = []
    for i in range(n):
        o = seen[i] if i < len(seen) else None
        s = want[i] if i < len(want) else None
        slots.append(
            {"slot": i, "observed": o, "static": s, "agree": o is not None and o == s, "static_at": static.get("at")}
        )
    s_out = static.get("outcome")
    if outcome == "raises":
        # a raise after the target captured (the draft's fc rejecting the width) is a capture verdict
        if seen and static.get("outcome") == "captures":
            return seen == want, slots
        return s_out == "raises" and same_raise(case, static), slots
    if outcome == "captures_nothing":
        return s_out == "captures_nothing" or (s_out == "captures" and not want), slots
    return outcome == "captures" and s_out == "captures" and seen == want, slots


def _compare_deltas(outcome: str, case: CaseRecord, static: StaticCase) -> tuple[bool, list[SlotComparison]]:
    """Slot by slot on (boundary, layer_value_of) pairs, when either side holds a layer's
    output without the residual; ``observed``/``static`` keep the boundary (None for a delta)."""
    seen = [_slot_key(s) for s in case.get("slots") or []]
    want = [_slot_key(s) for s in static.get("slots") or []] or [(b, None) for b in static.get("boundaries") or []]
    slots: list[SlotComparison] = []
    for i in range(max(len(seen), len(want))):
        o = seen[i] if i < len(seen) else (None, None)
        w = want[i] if i < len(want) else (None, None)
        slots.append({"slot": i, "observed": o[0], "static": w[0], "agree": o != (None, None) and o == w,
                      "static_at": static.get("at")})
    return outcome == static.get("outcome") and seen == want, slots


def same_raise(case: CaseRecord, static: StaticCase) -> bool:
    """The runtime raise went through the place the static trace says raises (any frame inside
    the engine's package: the trace may name the caller of the check that raises). A raise
    elsewhere (a backend the probe runs on refusing the model) confirms nothing. Without a place
    on either side there is nothing to compare but the outcome."""
    where, frames = static.get("raises_at"), case.get("raised_through")
    return not where or not frames or where in frames


def case_document(
    raw: EngineRun, case_spec: Case, case: CaseRecord, static: StaticCase, env: EngineEnv, engine: str
) -> EngineDocument:
    """The ``flowtrace.probe-engine/1`` document of one case."""
    agree, slots = compare(raw, case, static)
    start_error = raw.get("start_error")
    if start_error:  # the engine refused the model at start-up: nothing ran
        case = {"outcome": start_error["outcome"], "raised_at": start_error["raised_at"],
                "raised_through": start_error["raised_through"], "message": start_error["message"]}
        agree = static.get("outcome") == "raises" and same_raise(case, static)
        slots = []
    hidden = _hidden_size(raw)
    fc_in = case.get("fc_input") or None
    fc_expected = case_spec.fc_slots * hidden if hidden else None
    width_ok = None if not fc_in else fc_in.get("width") == fc_expected
    observed: ObservedCase = {
        "outcome": observed_outcome(case) if not start_error else "raises",
        "slots": [
            {"boundary": s.get("boundary"), "rel_err": s.get("rel_err"), "layer_value_of": s.get("layer_value_of")}
            for s in case.get("slots") or []
        ],
        "raised_at": case.get("raised_at"),
        "raised_through": case.get("raised_through"),
        "message": case.get("message"),
        "engine_layers": case.get("engine_layers"),
        "plumbing": case.get("plumbing"),
        "fc_input": (
            {
                "width": fc_in.get("width"),
                "expected": fc_expected,
                "matches": width_ok,
                "slots": [s.get("boundary") for s in fc_in.get("slots", [])],
            }
            if fc_in
            else None
        ),
        "after_raise": False,  # no runner has recorded it; the /1 document keeps the field
    }
    return {
        "schema": SCHEMA,
        "engine": engine,
        "method": raw.get("method"),
        "engine_version": env.version,
        "engine_distribution": env.distribution,
        "engine_source": env.source,
        "architecture": raw.get("architecture"),
        "model_class": raw.get("model_class") or raw.get("architecture"),
        "num_layers": raw.get("num_layers") or None,
        "case": case_spec.name,
        "mode": case_spec.mode,
        "layer_ids": list(case_spec.ids) if case_spec.ids is not None else None,
        "observed": observed,
        "static": {
            "boundaries": static.get("boundaries"), "outcome": static.get("outcome"),
            "raises_at": static.get("raises_at"), "reason": static.get("reason"), "at": static.get("at"),
            "fc_in_features": static.get("fc_in_features"), "slots": static.get("slots"),
        },
        "slots": slots,
        "agree": agree,
        "shrunk": raw.get("shrunk", []),
        "seconds": round(float(raw.get("seconds") or 0.0), 2),
        "peak_rss_mb": round(float(raw.get("peak_rss_mb") or 0.0), 1),
        "engine_processes": raw.get("processes", 1),
    }


def _hidden_size(raw: EngineRun) -> int | None:
    for s in raw.get("shrunk", []):
        if s["key"].endswith("hidden_size") and not s["key"].startswith("vision_config"):
            return int(s["to"])
    return raw.get("hidden_size")


def probe_engine(
    *,
    engine: str | None = None,
    settings: ProbeSettings | None = None,
    target_config: str | os.PathLike[str] | dict[str, Any],
    cases: Sequence[Case],
    num_layers: int | None = None,
    device: str = "cpu",
    engine_python: str | None = None,
    progress: Callable[[str], None] | None = None,
    method: str | None = None,
) -> list[EngineProbeResult]:
    """Run the engine once for all ``cases`` of one target and compare each with the static trace.

    ``engine`` names a profile with a ``[probe]`` table (None: the only one there is), unless
    ``settings`` are given (a user's profile file, read by the caller); ``method`` the
    speculative method whose draft the probe writes (None: the profile's default)."""
    t0 = time.time()
    settings = settings or probe_settings(engine, method=method)
    if not settings.method_default and any(c.mode != "draft" for c in cases):
        raise ProbeError(f"--method {settings.method}: --layer-ids go to the engine's setter directly, past the "
                         "method's own plumbing; give --draft-config (or leave --method out)")
    cases = [c if c.key else replace(c, key=settings.draft_ids_key) for c in cases]
    env = locate_engine(settings, device, engine_python)
    target = target_config if isinstance(target_config, dict) else read_json(target_config, "--target-config")
    if not (target.get("architectures") or [None])[0]:
        raise ProbeError("--target-config: no `architectures` entry to name the model class")
    raw = run_all(env, settings, target, cases, num_layers or DEFAULT_NUM_LAYERS, device, progress)
    shrunk_cfg, _ = runner.shrink_config(target, num_layers or DEFAULT_NUM_LAYERS)
    text = runner.text_part(shrunk_cfg)
    L = int(raw.get("num_layers") or text["num_hidden_layers"])
    if progress:
        progress(f"static trace of {env.source}")
    method = None if settings.method_default else settings.method
    architecture = raw["architecture"]
    if architecture is None:  # the runner names the target's own class, checked above
        raise ProbeError("--target-config: no `architectures` entry to name the model class")
    statics = static_traces(env.source, architecture, cases, L, text.get("hidden_size"), shrunk_cfg, method)
    raw["method"] = settings.method or None
    raw.setdefault("num_layers", L)
    raw["hidden_size"] = text.get("hidden_size")
    by_name = {c.get("name"): c for c in raw.get("cases", [])}
    docs = []
    for spec, static in zip(cases, statics):
        doc = case_document(raw, spec, by_name.get(spec.name, {"outcome": "not_run"}), static, env, settings.engine)
        doc["seconds_total"] = round(time.time() - t0, 2)
        docs.append(EngineProbeResult(doc))
    return docs


def engine_text(result: EngineProbeResult) -> str:
    """Human form: one line per slot, runtime next to the static trace's file:line."""
    d = result.doc
    o, s = d["observed"], d["static"]
    ids = d["layer_ids"] if d["layer_ids"] is not None else "none (engine default)"
    via = f"{d['method']} draft" if d.get("method") and d["mode"] == "draft" else d["mode"]
    head = f"probe engine {d['engine']} {d['engine_version']}: {d['model_class']} (L = {d['num_layers']})"
    lines = [f"{head}, ids {ids}, via {via}"]
    for sh in d["shrunk"]:
        lines.append(f"  shrunk {sh['key']}: {sh['from']} -> {sh['to']}")
    for sl in d["slots"]:
        verdict = "agree" if sl["agree"] else "disagree"
        lines.append(
            f"  slot {sl['slot']}: runtime b={sl['observed']}  static b={sl['static']}  [{sl['static_at']}]  {verdict}"
        )
        seen: Mapping[str, object] = o["slots"][sl["slot"]] if sl["slot"] < len(o["slots"]) else {}
        if seen.get("boundary") is None and seen.get("layer_value_of") is not None:
            lines.append(
                f"    runtime slot {sl['slot']} is what layer {seen['layer_value_of']} returns first, not the residual"
                " stream"
            )
        said = (s.get("slots") or [])[sl["slot"]] if sl["slot"] < len(s.get("slots") or []) else {}
        if said.get("boundary") is None and said.get("layer_value_of") is not None:
            lines.append(
                f"    static slot {sl['slot']} is what layer {said['layer_value_of']} returns first, not the residual"
                " stream"
            )
    if o["outcome"] == "raises":
        lines.append(f"  runtime raised at {o['raised_at']}: {o['message']}")
    if s["outcome"] != "captures":
        lines.append(
            f"  static: {s['outcome']}" + (f" at {s['raises_at']}" if s["raises_at"] else "") + f": {s['reason']}"
        )
    fc = o.get("fc_input")
    if fc and not fc["matches"]:
        lines.append(
            f"  the draft's fc was fed width {fc['width']}, it expects {fc['expected']} (states {fc['slots']})"
        )
    lines.append(
        f"=> {'agree' if d['agree'] else 'disagree'} ({d['seconds']} s in the engine, peak RSS {d['peak_rss_mb']} MB)"
    )
    return "\n".join(lines) + "\n"


__all__ = [
    "SCHEMA",
    "Case",
    "EngineEnv",
    "EngineProbeResult",
    "draft_case",
    "engine_text",
    "locate_engine",
    "parse_layer_ids",
    "probe_engine",
]

if __name__ == "__main__":  # pragma: no cover
    sys.exit("use `flowtrace probe engine`")

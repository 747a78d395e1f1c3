"""Engine profiles: the engine's conventions as data (``rules/engines/*.toml``).

The analyzer never names an engine's methods or attributes itself; it reads them from a
profile. A profile is validated when loaded so that a typo gives one clear line naming the
file and the key, not a KeyError deep inside a scan.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from flowtrace.errors import ProfileError

try:  # the stdlib's own parser of regular expressions (renamed in 3.11)
    import re._parser as _sre_parse  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_parse as _sre_parse  # type: ignore[no-redef]

_MAXREPEAT = _sre_parse.MAXREPEAT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


@dataclass(frozen=True, slots=True)
class CaptureHelper:
    name: str
    label_arg: int


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    description: str
    path: str
    detect_paths: tuple[str, ...]
    markers: tuple[str, ...]
    setters: tuple[str, ...]
    default_getters: tuple[str, ...]
    attributes: tuple[str, ...]
    flags: tuple[str, ...]
    containers: tuple[str, ...]
    packers: tuple[str, ...]
    container_methods: tuple[str, ...]
    helpers: tuple[CaptureHelper, ...]
    layers_attribute: str
    embedding_attribute: str
    interfaces: tuple[str, ...]
    holders: tuple[str, ...]
    capture_mode_enum: str
    entry_variables: tuple[str, ...]
    dict_files: tuple[str, ...]
    dict_name_pattern: str
    dict_module_prefix: str
    generation_dicts: tuple[str, ...]
    layer_id_keys: tuple[str, ...]
    fc_attribute: str
    pp_guards: tuple[str, ...]
    digest: str  # content hash, part of the fact-cache key
    # -- engines without a setter (see _SCHEMA_SOURCES): optional, empty by default -------------
    config_keys: tuple[str, ...] = ()
    context_fields: tuple[str, ...] = ()
    context_feeds: tuple[str, ...] = ()
    method_variables: tuple[str, ...] = ()
    method: str = ""
    builder_selector: str = ""
    builder_method: str = ""
    hooks: tuple[str, ...] = ()
    layer_index_attributes: tuple[str, ...] = ()
    serving_keys: tuple[str, ...] = ()
    metadata_attributes: tuple[str, ...] = ()
    opt_in_bases: tuple[str, ...] = ()
    post_norm_id: int | None = None
    registry_decorators: tuple[str, ...] = ()


def rules_directory() -> Path:
    """Where the profiles live: ``$FLOWTRACE_RULES``, the wheel's bundled copy, or the checkout's ``rules/``.

    The wheel ships the top-level ``rules/`` folder as ``flowtrace/bundled_rules``; an editable
    install or a plain checkout reads ``rules/`` itself, so there is one copy only.
    """
    env = os.environ.get("FLOWTRACE_RULES")
    if env:
        return Path(env)
    package = Path(__file__).resolve().parents[1]
    bundled = package / "bundled_rules"
    if (bundled / "engines").is_dir():
        return bundled
    return package.parent / "rules"


_SCHEMA: dict[str, dict[str, type]] = {
    "engine": {"name": str, "description": str, "detect_paths": list, "markers": list},
    "capture": {
        "setters": list,
        "default_getters": list,
        "attributes": list,
        "flags": list,
        "containers": list,
        "packers": list,
        "container_methods": list,
        "helpers": list,
        "layers_attribute": str,
        "embedding_attribute": str,
        "interfaces": list,
        "holders": list,
    },
    "capture_mode": {"enum": str},
    "registry": {"entry_variables": list, "dict_files": list, "dict_name_pattern": str, "dict_module_prefix": str, "generation_dicts": list},
    "draft": {"layer_id_keys": list, "fc_attribute": str, "pp_guards": list},
}


# Keys for engines whose ids come from a config attribute, a build context or a serving-config
# metadata hook instead of a setter (LMDeploy- and TensorRT-LLM-shaped code). Kept apart from
# _SCHEMA so that each block grows on its own; every key is optional.
_SCHEMA_SOURCES: dict[str, dict[str, type]] = {
    "config_capture": {
        "config_keys": list,
        "context_fields": list,
        "context_feeds": list,
        "method_variables": list,
        "method": str,
        "builder_selector": str,
        "builder_method": str,
    },
    "metadata_hook": {
        "hooks": list,
        "layer_index_attributes": list,
        "serving_keys": list,
        "metadata_attributes": list,
        "opt_in_bases": list,
        "post_norm_id": int,
    },
    # Registrations written as class decorators: @register_auto_model("LlamaForCausalLM").
    "registry_extra": {"decorators": list},
}

# A profile is a few dozen lines; anything far larger is a mistake (or hostile) and is refused
# before it is parsed.
MAX_PROFILE_BYTES = 256 * 1024
_MAX_PATTERN = 200


def _strings(value: list, where: str) -> tuple[str, ...]:
    for item in value:
        if not isinstance(item, str):
            raise ProfileError(f"{where}: expected a list of strings, found {item!r}")
    return tuple(value)


def _unbounded(node_list) -> bool:  # noqa: ANN001 - sre_parse's SubPattern
    """Does this parsed pattern contain a repeat with no upper bound?"""
    for op, arg in node_list:
        name = str(op)
        if name in ("MAX_REPEAT", "MIN_REPEAT"):
            low, high, sub = arg
            if high == _MAXREPEAT or high > 1 or _unbounded(sub):
                return True
        elif name == "SUBPATTERN" and _unbounded(arg[-1]):
            return True
        elif name == "BRANCH" and any(_unbounded(b) for b in arg[1]):
            return True
    return False


def _backtracks(node_list) -> bool:  # noqa: ANN001
    """A repeat around something that itself repeats or alternates: ``(a+)+``, ``(a|a)*``.

    Python's ``re`` backtracks, and such nesting takes exponential time on a near miss. Profile
    patterns are matched against identifiers, so nothing legitimate needs the shape.
    """
    for op, arg in node_list:
        name = str(op)
        if name in ("MAX_REPEAT", "MIN_REPEAT"):
            low, high, sub = arg
            many = high == _MAXREPEAT or high > 1
            if many and (_unbounded(sub) or any(str(o) == "BRANCH" or (str(o) == "SUBPATTERN" and any(str(x) == "BRANCH" for x, _ in a[-1])) for o, a in sub)):
                return True
            if _backtracks(sub):
                return True
        elif name == "SUBPATTERN" and _backtracks(arg[-1]):
            return True
        elif name == "BRANCH" and any(_backtracks(b) for b in arg[1]):
            return True
    return False


def regex_problem(pattern: str) -> str | None:
    """Why a profile regular expression is refused, or None."""
    if len(pattern) > _MAX_PATTERN:
        return f"longer than {_MAX_PATTERN} characters"
    try:
        re.compile(pattern)
        parsed = _sre_parse.parse(pattern)
    except Exception as exc:  # noqa: BLE001 - re.error, RecursionError, OverflowError on absurd patterns
        return f"not a valid regular expression ({exc})"
    if _backtracks(parsed):
        return "nested repetition (e.g. (a+)+) can backtrack catastrophically; write it without a repeat inside a repeat"
    return None


def _read_table(data: dict, path: Path, schema: dict[str, dict[str, type]]) -> dict[str, dict]:
    """Each section of ``schema`` with its keys checked; absent sections and keys are empty."""
    where = str(path)
    out: dict[str, dict] = {}
    for section, keys in schema.items():
        table = data.get(section, {})
        if not isinstance(table, dict):
            raise ProfileError(f"{where}: [{section}] must be a table, found {type(table).__name__}")
        unknown = sorted(set(table) - set(keys))
        if unknown:
            raise ProfileError(f"{where}: [{section}] has unknown key(s) {', '.join(unknown)}")
        values: dict = {}
        for key, kind in keys.items():
            value = table.get(key, _EMPTY[kind])
            if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
                raise ProfileError(f"{where}: [{section}] {key} must be a {_KIND[kind]}, found {type(value).__name__}")
            if kind is list and key != "helpers":
                value = _strings(value, f"{where}: [{section}] {key}")  # type: ignore[arg-type]  # a list: checked above
            values[key] = value
        out[section] = values
    return out


_EMPTY: dict[type, object] = {list: [], str: "", int: None}
_KIND: dict[type, str] = {list: "list", str: "str", int: "int"}


def _parse(path: Path) -> tuple[bytes, dict]:
    try:
        size = path.stat().st_size
        if size > MAX_PROFILE_BYTES:
            raise ProfileError(f"{path}: profile is {size} bytes, more than the {MAX_PROFILE_BYTES} a profile may have")
        raw = path.read_bytes()
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read profile ({exc.strerror or exc})") from None
    if len(raw) > MAX_PROFILE_BYTES:  # grew between stat and read
        raise ProfileError(f"{path}: profile is more than the {MAX_PROFILE_BYTES} bytes a profile may have")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ProfileError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:
        raise ProfileError(f"{path}: not valid TOML: nested too deeply") from None
    return raw, data


# --- Tables read by the checks, not by the scan (precision helper) ----------------------------
# [checks] is validated and loaded by flowtrace.engines.check_conventions (its keys: target
# methods, draft / non-target class patterns, speculative entry points, capture families, the
# engine's embedding id, the interface's holder path). Listed here only so load_profile accepts it.
_CHECK_TABLES = frozenset({"checks"})


def load_profile(path: Path) -> Profile:
    """Load and validate one profile file.

    Only ``[engine] name`` is required: every other key defaults to empty, so a profile written
    for today's keys keeps loading as keys are added (profile keys only grow).
    """
    path = Path(path)
    raw, data = _parse(path)
    known = set(_SCHEMA) | set(_SCHEMA_SOURCES) | _CHECK_TABLES
    unknown = sorted(k for k in data if k not in known)
    if unknown:
        raise ProfileError(f"{path}: unknown table(s) [{'], ['.join(unknown)}] (known: {', '.join(sorted(known))})")
    if "engine" not in data:
        raise ProfileError(f"{path}: missing table [engine] (a profile needs at least [engine] name = \"...\")")
    tables = _read_table(data, path, _SCHEMA)
    sources = _read_table(data, path, _SCHEMA_SOURCES)
    e, c, r, d = tables["engine"], tables["capture"], tables["registry"], tables["draft"]
    if not e["name"]:
        raise ProfileError(f"{path}: [engine] is missing the key 'name'")
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", e["name"]):
        raise ProfileError(f"{path}: [engine] name must be 1-64 letters, digits, '_', '.' or '-', found {e['name']!r}")
    helpers = []
    for item in c["helpers"]:
        if not isinstance(item, dict) or set(item) != {"name", "label_arg"} or not isinstance(item.get("name"), str) or type(item.get("label_arg")) is not int:
            raise ProfileError(f"{path}: [capture] helpers entries need {{ name = str, label_arg = int }}, found {item!r}")
        helpers.append(CaptureHelper(item["name"], item["label_arg"]))
    problem = regex_problem(r["dict_name_pattern"]) if r["dict_name_pattern"] else None
    if problem:
        raise ProfileError(f"{path}: [registry] dict_name_pattern: {problem}")
    cc, mh = sources["config_capture"], sources["metadata_hook"]
    return Profile(
        name=e["name"],
        description=e["description"],
        path=str(path),
        detect_paths=e["detect_paths"],
        markers=e["markers"],
        setters=c["setters"],
        default_getters=c["default_getters"],
        attributes=c["attributes"],
        flags=c["flags"],
        containers=c["containers"],
        packers=c["packers"],
        container_methods=c["container_methods"],
        helpers=tuple(helpers),
        layers_attribute=c["layers_attribute"] or "layers",
        embedding_attribute=c["embedding_attribute"] or "embed_tokens",
        interfaces=c["interfaces"],
        holders=c["holders"],
        capture_mode_enum=tables["capture_mode"]["enum"],
        entry_variables=r["entry_variables"],
        dict_files=r["dict_files"],
        dict_name_pattern=r["dict_name_pattern"],
        dict_module_prefix=r["dict_module_prefix"],
        generation_dicts=r["generation_dicts"],
        layer_id_keys=d["layer_id_keys"],
        fc_attribute=d["fc_attribute"] or "fc",
        pp_guards=d["pp_guards"],
        digest=hashlib.sha256(raw).hexdigest()[:16],
        config_keys=cc["config_keys"],
        context_fields=cc["context_fields"],
        context_feeds=cc["context_feeds"],
        method_variables=cc["method_variables"],
        method=cc["method"],
        builder_selector=cc["builder_selector"],
        builder_method=cc["builder_method"],
        hooks=mh["hooks"],
        layer_index_attributes=mh["layer_index_attributes"],
        serving_keys=mh["serving_keys"],
        metadata_attributes=mh["metadata_attributes"],
        opt_in_bases=mh["opt_in_bases"],
        post_norm_id=mh["post_norm_id"],
        registry_decorators=sources["registry_extra"]["decorators"],
    )


def available_profiles(directory: Path | None = None) -> dict[str, Path]:
    """Engine profile names mapped to their files, sorted by name."""
    base = (directory or rules_directory()) / "engines"
    if not base.is_dir():
        raise ProfileError(f"{base}: no engine profiles found (set FLOWTRACE_RULES to the rules/ folder)")
    return {p.stem: p for p in sorted(base.glob("*.toml"))}


def load_all(directory: Path | None = None, extra: tuple[Path, ...] = ()) -> list[Profile]:
    """The bundled profiles, with the user's profile files merged in (a user profile with a
    bundled profile's name replaces it; the others are added)."""
    by_name = {p.name: p for p in (load_profile(f) for f in available_profiles(directory).values())}
    for path in extra:
        profile = load_profile(Path(path))
        by_name[profile.name] = profile
    return [by_name[n] for n in sorted(by_name)]


def select_profiles(root: Path, forced: str | None = None, directory: Path | None = None, extra: tuple[Path, ...] = ()) -> list[Profile]:
    """The profiles for a tree: the forced one, else those whose detect paths exist, else all.

    Falling back to all profiles keeps a scan of an unfamiliar layout (a fork, a vendored
    copy) useful: the markers of every engine are tried. A profile file the user names
    (``--profile-file``) is always used unless ``--profile`` forces another one.
    """
    users = [load_profile(Path(f)) for f in extra]
    by_name = {p.name: p for p in load_all(directory)}
    by_name.update((p.name, p) for p in users)
    profiles = [by_name[n] for n in sorted(by_name)]
    if forced:
        chosen = [p for p in profiles if p.name == forced]
        if not chosen:
            names = ", ".join(p.name for p in profiles)
            raise ProfileError(f"unknown profile '{forced}' (available: {names})")
        return chosen
    if root.is_file():
        return profiles
    user_names = {p.name for p in users}
    detected = [p for p in profiles if p.name in user_names or any((root / d).is_dir() for d in p.detect_paths)]
    return detected or profiles


@dataclass(frozen=True, slots=True)
class Conventions:
    """The union of the selected profiles' names, as the visitors consume them."""

    setters: frozenset[str]
    setter_order: tuple[str, ...]  # entry points first, as the profiles list them
    default_getters: frozenset[str]
    attributes: frozenset[str]
    flags: frozenset[str]
    containers: frozenset[str]
    packers: frozenset[str]
    container_methods: frozenset[str]
    helpers: tuple[CaptureHelper, ...]
    layers_attributes: frozenset[str]
    embedding_attributes: frozenset[str]
    interfaces: frozenset[str]
    holders: frozenset[str]
    capture_mode_enums: frozenset[str]
    entry_variables: frozenset[str]
    dict_files: tuple[str, ...]
    dict_name_patterns: tuple[str, ...]
    dict_module_prefixes: tuple[str, ...]
    generation_dicts: frozenset[str]
    layer_id_keys: tuple[str, ...]
    fc_attributes: frozenset[str]
    pp_guards: tuple[str, ...]
    markers: tuple[bytes, ...]
    digest: str
    # -- ids without a setter (config attribute, build context, metadata hook) --------------------
    config_keys: frozenset[str] = frozenset()
    context_fields: tuple[str, ...] = ()
    context_feeds: frozenset[str] = frozenset()
    method_variables: frozenset[str] = frozenset()
    methods: frozenset[str] = frozenset()
    builder_selectors: frozenset[str] = frozenset()
    builder_methods: frozenset[str] = frozenset()
    hooks: frozenset[str] = frozenset()
    layer_index_attributes: frozenset[str] = frozenset()
    serving_keys: tuple[str, ...] = ()
    metadata_attributes: frozenset[str] = frozenset()
    opt_in_bases: frozenset[str] = frozenset()
    post_norm_ids: frozenset[int] = frozenset()
    registry_decorators: frozenset[str] = frozenset()

    @classmethod
    def merge(cls, profiles: list[Profile]) -> Conventions:
        def union(attr: str) -> frozenset[str]:
            return frozenset(x for p in profiles for x in getattr(p, attr) if x)

        def ordered(attr: str) -> tuple[str, ...]:
            return tuple(dict.fromkeys(x for p in profiles for x in getattr(p, attr) if x))

        helpers = tuple({h.name: h for p in profiles for h in p.helpers}.values())
        markers = sorted(
            {m for p in profiles for m in p.markers} | union("setters") | union("attributes") | union("config_keys") | union("hooks") | union("context_feeds") | union("serving_keys")
            | {f.rsplit(".", 1)[-1] for f in union("context_fields")}
        )
        return cls(
            setters=union("setters"),
            setter_order=ordered("setters"),
            default_getters=union("default_getters"),
            attributes=union("attributes"),
            flags=union("flags"),
            containers=union("containers"),
            packers=union("packers"),
            container_methods=union("container_methods"),
            helpers=helpers,
            layers_attributes=frozenset(p.layers_attribute for p in profiles),
            embedding_attributes=frozenset(p.embedding_attribute for p in profiles),
            interfaces=union("interfaces"),
            holders=union("holders"),
            capture_mode_enums=frozenset(p.capture_mode_enum for p in profiles if p.capture_mode_enum),
            entry_variables=union("entry_variables"),
            dict_files=ordered("dict_files"),
            dict_name_patterns=tuple(p.dict_name_pattern for p in profiles if p.dict_name_pattern),
            dict_module_prefixes=tuple(p.dict_module_prefix for p in profiles if p.dict_module_prefix),
            generation_dicts=union("generation_dicts"),
            layer_id_keys=ordered("layer_id_keys"),
            fc_attributes=frozenset(p.fc_attribute for p in profiles),
            pp_guards=ordered("pp_guards"),
            markers=tuple(m.encode() for m in markers),
            digest=hashlib.sha256("".join(p.digest for p in profiles).encode()).hexdigest()[:16],
            config_keys=union("config_keys"),
            context_fields=ordered("context_fields"),
            context_feeds=union("context_feeds"),
            method_variables=union("method_variables"),
            methods=frozenset(p.method for p in profiles if p.method),
            builder_selectors=frozenset(p.builder_selector for p in profiles if p.builder_selector),
            builder_methods=frozenset(p.builder_method for p in profiles if p.builder_method),
            hooks=union("hooks"),
            layer_index_attributes=union("layer_index_attributes"),
            serving_keys=ordered("serving_keys"),
            metadata_attributes=union("metadata_attributes"),
            opt_in_bases=union("opt_in_bases"),
            post_norm_ids=frozenset(p.post_norm_id for p in profiles if p.post_norm_id is not None),
            registry_decorators=union("registry_decorators"),
        )

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
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

from flowtrace.engines.methods import SpecMethod, default_of, find_method, merge_methods, read_methods, with_legacy
from flowtrace.errors import ProfileError

try:  # the stdlib's own parser of regular expressions (renamed in 3.11)
    import re._parser as _sre_parse
except ImportError:  # pragma: no cover - Python 3.10
    import sre_parse as _sre_parse

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
class CaptureFamily:
    """Another capture family writing the same capture attribute (``[checks] capture_families``)."""

    name: str
    setters: tuple[str, ...]


# What a key holds. STRINGS: a list of strings; TEXT: a string; INT: an integer (not a bool);
# HELPERS / FAMILIES: the two lists of small tables; METHODS: a table whose every key is a
# method's table (``[methods.<name>]``, flowtrace.engines.methods).
STRINGS, TEXT, INT, HELPERS, FAMILIES, METHODS = "strings", "str", "int", "helpers", "families", "methods"
_EMPTY_OF: dict[str, object] = {STRINGS: (), TEXT: "", INT: None, HELPERS: (), FAMILIES: (), METHODS: ()}
_KIND_WORD: dict[str, str] = {
    STRINGS: "list",
    TEXT: "str",
    INT: "int",
    HELPERS: "list",
    FAMILIES: "list",
    METHODS: "table",
}


@dataclass(frozen=True, slots=True)
class KeySpec:
    """One profile key, declared once on its :class:`Profile` field: its table, what it holds,
    the regular-expression guard, the value an absent or empty key takes, and how the selected
    profiles combine it into :class:`Conventions` (``merged``: the attribute, "" when the scan
    does not read it; ``how``: union, ordered, each, each_ordered or helpers)."""

    table: str
    kind: str
    regex: bool = False
    fallback: object = None
    merged: str | None = None
    how: str = "union"


def _key(
    table: str,
    kind: str = STRINGS,
    *,
    regex: bool = False,
    fallback: object = None,
    merged: str | None = None,
    how: str = "union",
) -> Any:
    spec = KeySpec(table, kind, regex, fallback, merged, how)
    return field(default=fallback if fallback is not None else _EMPTY_OF[kind], metadata={"key": spec})


@dataclass(frozen=True, slots=True)
class Profile:
    """One engine profile. Every key is declared here, once, with its table and kind
    (:func:`_key`): loading, validation, the known tables and keys and the merge into
    :class:`Conventions` are all derived from these declarations. Keys only grow; each defaults
    to empty, so a profile written for today's keys keeps loading."""

    name: str = field(metadata={"key": KeySpec("engine", TEXT, merged="")})  # required
    path: str
    digest: str  # content hash, part of the fact-cache key
    description: str = _key("engine", TEXT, merged="")
    detect_paths: tuple[str, ...] = _key("engine", merged="")
    markers: tuple[str, ...] = _key("engine", merged="")  # merged by hand: see Conventions.merge
    setters: tuple[str, ...] = _key("capture")
    default_getters: tuple[str, ...] = _key("capture")
    attributes: tuple[str, ...] = _key("capture")
    flags: tuple[str, ...] = _key("capture")
    containers: tuple[str, ...] = _key("capture")
    packers: tuple[str, ...] = _key("capture")
    container_methods: tuple[str, ...] = _key("capture")
    helpers: tuple[CaptureHelper, ...] = _key("capture", HELPERS, how="helpers")
    layers_attribute: str = _key("capture", TEXT, fallback="layers", merged="layers_attributes", how="each")
    # attributes of the model holding the target's layer count (bound to L where a setter or a
    # default getter is run)
    layer_count_attributes: tuple[str, ...] = _key("capture")
    embedding_attribute: str = _key("capture", TEXT, fallback="embed_tokens", merged="embedding_attributes", how="each")
    interfaces: tuple[str, ...] = _key("capture")
    holders: tuple[str, ...] = _key("capture")
    capture_mode_enum: str = _key("capture_mode:enum", TEXT, merged="capture_mode_enums", how="each")
    entry_variables: tuple[str, ...] = _key("registry")
    dict_files: tuple[str, ...] = _key("registry", how="ordered")
    dict_name_pattern: str = _key("registry", TEXT, regex=True, merged="dict_name_patterns", how="each_ordered")
    dict_module_prefix: str = _key("registry", TEXT, merged="dict_module_prefixes", how="each_ordered")
    generation_dicts: tuple[str, ...] = _key("registry")
    layer_id_keys: tuple[str, ...] = _key("draft", how="ordered")
    fc_attribute: str = _key("draft", TEXT, fallback="fc", merged="fc_attributes", how="each")
    pp_guards: tuple[str, ...] = _key("draft", how="ordered")
    # the model's first and end (exclusive) layer of its pipeline stage: 0 and L on the traced
    # rank, which holds every layer
    stage_start_attributes: tuple[str, ...] = _key("draft")
    stage_end_attributes: tuple[str, ...] = _key("draft")
    # -- engines without a setter: ids from a config attribute, a build context or a metadata hook
    config_keys: tuple[str, ...] = _key("config_capture")
    context_fields: tuple[str, ...] = _key("config_capture", how="ordered")
    context_feeds: tuple[str, ...] = _key("config_capture")
    method_variables: tuple[str, ...] = _key("config_capture")
    method: str = _key("config_capture", TEXT, merged="methods", how="each")
    builder_selector: str = _key("config_capture", TEXT, merged="builder_selectors", how="each")
    builder_method: str = _key("config_capture", TEXT, merged="builder_methods", how="each")
    hooks: tuple[str, ...] = _key("metadata_hook")
    layer_index_attributes: tuple[str, ...] = _key("metadata_hook")
    serving_keys: tuple[str, ...] = _key("metadata_hook", how="ordered")
    metadata_attributes: tuple[str, ...] = _key("metadata_hook")
    opt_in_bases: tuple[str, ...] = _key("metadata_hook")
    post_norm_id: int | None = _key("metadata_hook", INT, merged="post_norm_ids", how="each")
    # what the metadata's default method reads besides the ids: its layer-count attributes (bound
    # to L) and flags that are false on a target's metadata (a draft-side or another method's path)
    metadata_layer_counts: tuple[str, ...] = _key("metadata_hook:layer_count_attributes")
    target_false_flags: tuple[str, ...] = _key("metadata_hook")
    # Registrations written as class decorators: @register_auto_model("LlamaForCausalLM").
    registry_decorators: tuple[str, ...] = _key("registry_extra:decorators")
    # -- where the engine's package sits in its source repository (web links of a release) -------
    repository_subdir: str = _key("source", TEXT, merged="")
    # -- read by the checks, not the scan (flowtrace.engines.check_conventions) -----------------
    target_methods: tuple[str, ...] = _key("checks", merged="")
    draft_class_patterns: tuple[str, ...] = _key("checks", regex=True, merged="")
    draft_projection_attributes: tuple[str, ...] = _key("checks", merged="")
    non_target_patterns: tuple[str, ...] = _key("checks", regex=True, merged="")
    speculative_entry_points: tuple[str, ...] = _key("checks", merged="")
    capture_families: tuple[CaptureFamily, ...] = _key("checks", FAMILIES, merged="")
    embedding_id: int | None = _key("checks", INT, merged="")
    interface_holder_path: tuple[str, ...] = _key("checks", merged="")
    startup_refusal: str = _key("checks", TEXT, merged="")
    startup_forward: str = _key("checks", TEXT, merged="")
    platform_builds: tuple[str, ...] = _key("checks", merged="")
    # -- the serving path: what the runner does with the model (flowtrace.index.runner_steps) -----
    # runner methods a start-up runs (its sequence is read from their bodies)
    startup: tuple[str, ...] = _key("serving")
    graph_capture: tuple[str, ...] = _key("serving")  # calls that capture device graphs
    warmup: tuple[str, ...] = _key("serving")  # calls that run dummy forwards at start-up
    weight_reload: tuple[str, ...] = _key("serving")  # runner methods that reload weights (and may re-capture)
    # the batches graph replay serves
    replayed_phases: str = _key("serving", TEXT, merged="replayed_phases", how="each")
    # "<flag>: <words>": a batch flag that picks another forward path
    batch_paths: tuple[str, ...] = _key("serving", how="ordered")
    speculative_excludes: tuple[str, ...] = _key("serving")  # batch flags the engine never sets while a draft is served
    # -- read by `flowtrace probe engine`, not the scan (flowtrace.probe.settings) ---------------
    package: str = _key("probe", TEXT, merged="")
    runner: str = _key("probe", TEXT, merged="")
    install: str = _key("probe", TEXT, merged="")
    builds: tuple[str, ...] = _key("probe", merged="")
    env: tuple[str, ...] = _key("probe", merged="")
    draft_architecture: str = _key("probe", TEXT, merged="")
    draft_model_type: str = _key("probe", TEXT, merged="")
    draft_ids_key: str = _key("probe", TEXT, merged="")
    # -- the speculative methods the engine serves ([methods.<name>], flowtrace.engines.methods);
    # the keys above that describe one method (setters, default getters, layer-id keys, the
    # builders' method word, the probe's draft) are its default method's --------------------------
    methods_served: tuple[SpecMethod, ...] = _key("methods:<name>", METHODS, merged="")

    @property
    def default_method(self) -> SpecMethod:
        """The method answered when ``--method`` is not given."""
        return default_of(self.methods_served)


def _where(field_name: str, spec: KeySpec) -> tuple[str, str]:
    """(table, TOML key) of a declaration: ``table:key`` where the TOML name differs."""
    table, _, toml = spec.table.partition(":")
    return table, toml or field_name


def profile_keys() -> tuple[tuple[str, str, str, KeySpec], ...]:
    """(table, TOML key, Profile field, spec) of every declared key, in declaration order."""
    out = []
    for f in fields(Profile):
        spec = f.metadata.get("key")
        if spec is not None:
            table, toml = _where(f.name, spec)
            out.append((table, toml, f.name, spec))
    return tuple(out)


def profile_tables() -> dict[str, tuple[str, ...]]:
    """Each table with its keys, in declaration order (what a profile may contain)."""
    out: dict[str, list[str]] = {}
    for table, toml, _, _ in profile_keys():
        out.setdefault(table, []).append(toml)
    return {t: tuple(k) for t, k in out.items()}


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


# A profile is a few dozen lines; anything far larger is a mistake (or hostile) and is refused
# before it is parsed.
MAX_PROFILE_BYTES = 256 * 1024
_MAX_PATTERN = 200


def _strings(value: list[Any], where: str) -> tuple[str, ...]:
    for item in value:
        if not isinstance(item, str):
            raise ProfileError(f"{where}: expected a list of strings, found {item!r}")
    return tuple(value)


def _unbounded(node_list: Any) -> bool:  # sre_parse's SubPattern: private, typed loosely
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


def _backtracks(node_list: Any) -> bool:  # sre_parse's SubPattern
    """A repeat around something that itself repeats or alternates: ``(a+)+``, ``(a|a)*``.

    Python's ``re`` backtracks, and such nesting takes exponential time on a near miss. Profile
    patterns are matched against identifiers, so nothing legitimate needs the shape.
    """
    for op, arg in node_list:
        name = str(op)
        if name in ("MAX_REPEAT", "MIN_REPEAT"):
            low, high, sub = arg
            many = high == _MAXREPEAT or high > 1
            if many and (
                _unbounded(sub)
                or any(
                    str(o) == "BRANCH" or (str(o) == "SUBPATTERN" and any(str(x) == "BRANCH" for x, _ in a[-1]))
                    for o, a in sub
                )
            ):
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
        return (
            "nested repetition (e.g. (a+)+) can backtrack catastrophically; write it without a repeat inside a repeat"
        )
    return None


def _helpers(value: list[Any], where: str) -> tuple[CaptureHelper, ...]:
    out = []
    for item in value:
        if (
            not isinstance(item, dict)
            or set(item) != {"name", "label_arg"}
            or not isinstance(item.get("name"), str)
            or type(item.get("label_arg")) is not int
        ):
            raise ProfileError(f"{where} entries need {{ name = str, label_arg = int }}, found {item!r}")
        out.append(CaptureHelper(item["name"], item["label_arg"]))
    return tuple(out)


def _families(value: list[Any], where: str) -> tuple[CaptureFamily, ...]:
    out = []
    for item in value:
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("name"), str)
            or not isinstance(item.get("setters", []), list)
        ):
            raise ProfileError(f"{where} entries need {{ name = str, setters = [str] }}, found {item!r}")
        out.append(CaptureFamily(item["name"], _strings(item.get("setters", []), f"{where} {item['name']}.setters")))
    return tuple(out)


_PYTHON_TYPE: dict[str, type] = {STRINGS: list, TEXT: str, INT: int, HELPERS: list, FAMILIES: list}


def _read_key(table: dict[str, Any], toml: str, spec: KeySpec, where: str) -> Any:
    """One key's value, checked against its declaration (absent: its default)."""
    if toml not in table:
        return spec.fallback if spec.fallback is not None else _EMPTY_OF[spec.kind]
    value: Any = table[toml]
    if not isinstance(value, _PYTHON_TYPE[spec.kind]) or isinstance(value, bool):
        raise ProfileError(f"{where} {toml} must be a {_KIND_WORD[spec.kind]}, found {type(value).__name__}")
    converters: dict[str, Callable[[list[Any], str], Any]] = {STRINGS: _strings, HELPERS: _helpers, FAMILIES: _families}
    convert = converters.get(spec.kind)
    read: Any = convert(table[toml], f"{where} {toml}") if convert is not None else value
    if spec.regex:
        _guard_patterns(read, f"{where} {toml}")
    if spec.fallback is not None and not read:
        return spec.fallback
    return read


def _guard_patterns(read: str | tuple[str, ...], where: str) -> None:
    """The regular-expression guard (:func:`regex_problem`) on one pattern or a list of them."""
    for pattern in (read,) if isinstance(read, str) else read:
        problem = regex_problem(pattern) if pattern else None
        if problem:
            raise ProfileError(f"{where}: {problem}" if isinstance(read, str) else f"{where}: {pattern!r}: {problem}")


def _read_tables(data: dict[str, Any], path: Path) -> dict[str, object]:
    """Every declared key, table by table, as Profile field values."""
    values: dict[str, object] = {}
    keys = profile_keys()
    for section, names in profile_tables().items():
        table = data.get(section, {})
        if not isinstance(table, dict):
            raise ProfileError(f"{path}: [{section}] must be a table, found {type(table).__name__}")
        whole = next((name for t, _, name, spec in keys if t == section and spec.kind == METHODS), None)
        if whole is not None:  # every key of the table is a method's own table
            values[whole] = read_methods(table, str(path))
            continue
        unknown = sorted(set(table) - set(names))
        if unknown:
            raise ProfileError(f"{path}: [{section}] has unknown key(s) {', '.join(unknown)}")
        for t, toml, field_name, spec in keys:
            if t == section:
                values[field_name] = _read_key(table, toml, spec, f"{path}: [{section}]")
    return values


def _parse(path: Path) -> tuple[bytes, dict[str, Any]]:
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


def load_profile(path: Path) -> Profile:
    """Load and validate one profile file.

    Only ``[engine] name`` is required: every other key defaults to empty, so a profile written
    for today's keys keeps loading as keys are added (profile keys only grow).
    """
    path = Path(path)
    raw, data = _parse(path)
    known = set(profile_tables())
    unknown = sorted(k for k in data if k not in known)
    if unknown:
        raise ProfileError(f"{path}: unknown table(s) [{'], ['.join(unknown)}] (known: {', '.join(sorted(known))})")
    if "engine" not in data:
        raise ProfileError(f"{path}: missing table [engine] (a profile needs at least [engine] name = \"...\")")
    values = _read_tables(data, path)
    _fold_methods(values, str(path))
    name = values["name"]
    if not name:
        raise ProfileError(f"{path}: [engine] is missing the key 'name'")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
        raise ProfileError(f"{path}: [engine] name must be 1-64 letters, digits, '_', '.' or '-', found {name!r}")
    return Profile(path=str(path), digest=hashlib.sha256(raw).hexdigest()[:16], **values)  # type: ignore[arg-type]


# The keys written before methods existed, as the default method's keys (Profile field -> method key).
_LEGACY_KEYS = {
    "setters": "setters",
    "default_getters": "default_getters",
    "layer_id_keys": "layer_id_keys",
    "method": "engine_name",
    "draft_architecture": "probe_draft_architecture",
    "draft_model_type": "probe_draft_model_type",
    "draft_ids_key": "probe_draft_ids_key",
}


def _fold_methods(values: dict[str, object], where: str) -> None:
    """The older keys and the default method say the same thing: fold the older keys into the
    default method (:func:`flowtrace.engines.methods.with_legacy`), then give those fields the
    default method's values, so what reads them (the probe, the family detection) keeps
    reading the method it always read."""
    legacy = {key: values[field_name] for field_name, key in _LEGACY_KEYS.items() if values.get(field_name)}
    methods = with_legacy(values["methods_served"], legacy, where)  # type: ignore[arg-type]
    values["methods_served"] = methods
    chosen = default_of(methods)
    for field_name, key in _LEGACY_KEYS.items():
        values[field_name] = getattr(chosen, key)


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


def select_profiles(
    root: Path, forced: str | None = None, directory: Path | None = None, extra: tuple[Path, ...] = ()
) -> list[Profile]:
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
    detected = [p for p in profiles if p.name in user_names or any(detects(root, d) for d in p.detect_paths)]
    return detected or profiles


def root_package(root: Path) -> str:
    """The dotted package a scanned folder *is* (``""`` when it is not one).

    Scanning ``engine/pkg`` (a folder with ``__init__.py``) names its files relative to it,
    yet its own modules import each other absolutely (``from pkg.models.x import Y``): unless
    the files are called ``pkg.models.x`` those imports resolve to nothing. The folder and
    each parent that is a package too (``pkg/sub`` -> ``pkg.sub``) give the prefix; a name
    that is no identifier stops the walk (a release folder ``engine-1.0`` is no package)."""
    names: list[str] = []
    folder = root.resolve()
    while (folder / "__init__.py").is_file() and folder.name.isidentifier() and folder.parent != folder:
        names.append(folder.name)
        folder = folder.parent
    return ".".join(reversed(names))


def detects(root: Path, detect_path: str) -> bool:
    """``detect_path`` exists under ``root``, or ``root`` is a package the path runs through
    (scanning ``engine/pkg`` itself: ``pkg/models`` is then ``models`` inside it)."""
    if (root / detect_path).is_dir():
        return True
    package = root_package(root).replace(".", "/")
    return bool(package) and detect_path.startswith(package + "/") and (root / detect_path[len(package) + 1 :]).is_dir()


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
    metadata_layer_counts: frozenset[str] = frozenset()
    target_false_flags: frozenset[str] = frozenset()
    # -- what a setter or default getter reads besides the ids ([capture], [draft]) ---------------
    layer_count_attributes: frozenset[str] = frozenset()
    stage_start_attributes: frozenset[str] = frozenset()
    stage_end_attributes: frozenset[str] = frozenset()
    registry_decorators: frozenset[str] = frozenset()
    # -- the serving path ([serving]) --------------------------------------------------------------
    startup: frozenset[str] = frozenset()
    graph_capture: frozenset[str] = frozenset()
    warmup: frozenset[str] = frozenset()
    weight_reload: frozenset[str] = frozenset()
    replayed_phases: frozenset[str] = frozenset()
    batch_paths: tuple[str, ...] = ()
    speculative_excludes: frozenset[str] = frozenset()
    # The package the scanned folder itself is (:func:`root_package`): the prefix of
    # every module name, so the tree's absolute imports of its own modules resolve.
    package: str = ""
    # -- the speculative methods ([methods.<name>]): every method the profiles declare, the one
    # these conventions answer for (its setters, getters and layer-id keys are the ones above),
    # and the tree functions that compute a method's default ids (the index reads their source).
    methods_served: tuple[SpecMethod, ...] = ()
    method: SpecMethod | None = None
    id_functions: frozenset[str] = frozenset()
    # -- derived, never passed: every class a capture collector is built from (``containers`` and
    # ``packers``), made once here rather than by each reader per call.
    collectors: frozenset[str] = field(init=False, default=frozenset())

    def __post_init__(self) -> None:
        object.__setattr__(self, "collectors", self.containers | self.packers)

    def is_dict_file(self, path: str) -> bool:
        """``path`` (relative to the scanned root) is a registry file a profile names; the
        names are written from the engine's package down, so the root's own package counts."""
        full = f"{self.package.replace('.', '/')}/{path}" if self.package else path
        return any(full.endswith(d) for d in self.dict_files)

    @classmethod
    def merge(cls, profiles: list[Profile], method: str | None = None) -> Conventions:
        """The union of the profiles, each key combined as its declaration says (``merged`` /
        ``how`` on the :class:`Profile` field); markers, setter order and digest are derived.

        ``method``: the speculative method the index and the analysis answer for (None: the
        profiles' default method, whose keys are the profile's own, so nothing changes); another
        method's setters, default getters, layer-id keys and builders' word replace the default
        method's, and the digest names it, so the fact cache keeps each method's facts apart."""
        values: dict[str, object] = {}
        for _, _, name, spec in profile_keys():
            if spec.merged != "":
                values[spec.merged or name] = _MERGE[spec.how](profiles, name)
        served = merge_methods(p.methods_served for p in profiles)
        chosen = _chosen(served, method)
        setter_order = _ordered(profiles, "setters")
        digest_text = "".join(p.digest for p in profiles)
        if chosen is not None and not chosen.default:
            setter_order = chosen.setters
            values["setters"] = frozenset(setter_order)
            values["default_getters"] = frozenset(chosen.default_getters)
            values["layer_id_keys"] = chosen.layer_id_keys
            values["methods"] = frozenset((chosen.engine_name,)) if chosen.engine_name else frozenset()
            digest_text += f"\0method={chosen.name}"
        functions = (
            frozenset((chosen.default_function,)) if chosen is not None and chosen.default_function else frozenset()
        )
        setters = _union(profiles, "setters") | values["setters"]  # type: ignore[operator]
        markers = sorted(
            {m for p in profiles for m in p.markers}
            | setters
            | _union(profiles, "attributes")
            | _union(profiles, "config_keys")
            | _union(profiles, "hooks")
            | _union(profiles, "context_feeds")
            | _union(profiles, "serving_keys")
            | {f.rsplit(".", 1)[-1] for f in _union(profiles, "context_fields")}
            | functions
        )
        return cls(
            setter_order=setter_order,
            markers=tuple(m.encode() for m in markers),
            digest=hashlib.sha256(digest_text.encode()).hexdigest()[:16],
            methods_served=served,
            method=chosen,
            id_functions=functions,
            **values,  # type: ignore[arg-type]
        )


def _chosen(served: tuple[SpecMethod, ...], method: str | None) -> SpecMethod | None:
    """The method the conventions answer for: the one named (by name or label), else the default."""
    if method is None:
        return default_of(served) if served else None
    found = find_method(served, method)
    if found is None:
        raise ProfileError(
            f"unknown method {method!r}: the selected profiles serve"
            f" {', '.join(m.name for m in served) or 'none'} (pass one of those to --method)"
        )
    return found


# The mergers read a Profile field by its declared name (getattr), so their items are typed
# by that field, not here.
def _union(profiles: list[Profile], attr: str) -> frozenset[Any]:
    return frozenset(x for p in profiles for x in getattr(p, attr) if x)


def _ordered(profiles: list[Profile], attr: str) -> tuple[Any, ...]:
    return tuple(dict.fromkeys(x for p in profiles for x in getattr(p, attr) if x))


def _each(profiles: list[Profile], attr: str) -> frozenset[Any]:
    return frozenset(v for p in profiles if (v := getattr(p, attr)) is not None and v != "")


def _each_ordered(profiles: list[Profile], attr: str) -> tuple[Any, ...]:
    return tuple(v for p in profiles if (v := getattr(p, attr)) is not None and v != "")


def _helpers_by_name(profiles: list[Profile], attr: str) -> tuple[CaptureHelper, ...]:
    return tuple({h.name: h for p in profiles for h in getattr(p, attr)}.values())


_MERGE: dict[str, Callable[[list[Profile], str], object]] = {
    "union": _union, "ordered": _ordered, "each": _each, "each_ordered": _each_ordered, "helpers": _helpers_by_name,
}

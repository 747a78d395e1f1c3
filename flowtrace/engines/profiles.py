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


def _strings(value: list, where: str) -> tuple[str, ...]:
    for item in value:
        if not isinstance(item, str):
            raise ProfileError(f"{where}: expected a list of strings, found {item!r}")
    return tuple(value)


def load_profile(path: Path) -> Profile:
    """Load and validate one profile file."""
    try:
        raw = path.read_bytes()
        data = tomllib.loads(raw.decode("utf-8"))
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read profile ({exc.strerror or exc})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ProfileError(f"{path}: not valid TOML: {exc}") from None
    for section, keys in _SCHEMA.items():
        table = data.get(section)
        if not isinstance(table, dict):
            raise ProfileError(f"{path}: missing table [{section}]")
        for key, kind in keys.items():
            if key not in table:
                raise ProfileError(f"{path}: [{section}] is missing the key '{key}'")
            if not isinstance(table[key], kind):
                raise ProfileError(f"{path}: [{section}] {key} must be a {kind.__name__}, found {type(table[key]).__name__}")
        unknown = sorted(set(table) - set(keys))
        if unknown:
            raise ProfileError(f"{path}: [{section}] has unknown key(s) {', '.join(unknown)}")
    helpers = []
    for item in data["capture"]["helpers"]:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not isinstance(item.get("label_arg"), int):
            raise ProfileError(f"{path}: [capture] helpers entries need {{ name = str, label_arg = int }}, found {item!r}")
        helpers.append(CaptureHelper(item["name"], item["label_arg"]))
    e, c, r, d = data["engine"], data["capture"], data["registry"], data["draft"]
    try:
        re.compile(r["dict_name_pattern"])
    except Exception as exc:  # noqa: BLE001 - re.error, RecursionError on absurd patterns
        raise ProfileError(f"{path}: [registry] dict_name_pattern is not a valid regular expression ({exc})") from None
    where = str(path)
    return Profile(
        name=e["name"],
        description=e["description"],
        path=where,
        detect_paths=_strings(e["detect_paths"], f"{where}: [engine] detect_paths"),
        markers=_strings(e["markers"], f"{where}: [engine] markers"),
        setters=_strings(c["setters"], f"{where}: [capture] setters"),
        default_getters=_strings(c["default_getters"], f"{where}: [capture] default_getters"),
        attributes=_strings(c["attributes"], f"{where}: [capture] attributes"),
        flags=_strings(c["flags"], f"{where}: [capture] flags"),
        containers=_strings(c["containers"], f"{where}: [capture] containers"),
        packers=_strings(c["packers"], f"{where}: [capture] packers"),
        container_methods=_strings(c["container_methods"], f"{where}: [capture] container_methods"),
        helpers=tuple(helpers),
        layers_attribute=c["layers_attribute"],
        embedding_attribute=c["embedding_attribute"],
        interfaces=_strings(c["interfaces"], f"{where}: [capture] interfaces"),
        holders=_strings(c["holders"], f"{where}: [capture] holders"),
        capture_mode_enum=data["capture_mode"]["enum"],
        entry_variables=_strings(r["entry_variables"], f"{where}: [registry] entry_variables"),
        dict_files=_strings(r["dict_files"], f"{where}: [registry] dict_files"),
        dict_name_pattern=r["dict_name_pattern"],
        dict_module_prefix=r["dict_module_prefix"],
        generation_dicts=_strings(r["generation_dicts"], f"{where}: [registry] generation_dicts"),
        layer_id_keys=_strings(d["layer_id_keys"], f"{where}: [draft] layer_id_keys"),
        fc_attribute=d["fc_attribute"],
        pp_guards=_strings(d["pp_guards"], f"{where}: [draft] pp_guards"),
        digest=hashlib.sha256(raw).hexdigest()[:16],
    )


def available_profiles(directory: Path | None = None) -> dict[str, Path]:
    """Engine profile names mapped to their files, sorted by name."""
    base = (directory or rules_directory()) / "engines"
    if not base.is_dir():
        raise ProfileError(f"{base}: no engine profiles found (set FLOWTRACE_RULES to the rules/ folder)")
    return {p.stem: p for p in sorted(base.glob("*.toml"))}


def load_all(directory: Path | None = None) -> list[Profile]:
    return [load_profile(p) for p in available_profiles(directory).values()]


def select_profiles(root: Path, forced: str | None = None, directory: Path | None = None) -> list[Profile]:
    """The profiles for a tree: the forced one, else those whose detect paths exist, else all.

    Falling back to all profiles keeps a scan of an unfamiliar layout (a fork, a vendored
    copy) useful: the markers of every engine are tried.
    """
    profiles = load_all(directory)
    if forced:
        chosen = [p for p in profiles if p.name == forced]
        if not chosen:
            names = ", ".join(p.name for p in profiles)
            raise ProfileError(f"unknown profile '{forced}' (available: {names})")
        return chosen
    if root.is_file():
        return profiles
    detected = [p for p in profiles if any((root / d).is_dir() for d in p.detect_paths)]
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

    @classmethod
    def merge(cls, profiles: list[Profile]) -> Conventions:
        def union(attr: str) -> frozenset[str]:
            return frozenset(x for p in profiles for x in getattr(p, attr) if x)

        def ordered(attr: str) -> tuple[str, ...]:
            return tuple(dict.fromkeys(x for p in profiles for x in getattr(p, attr) if x))

        helpers = tuple({h.name: h for p in profiles for h in p.helpers}.values())
        markers = sorted({m for p in profiles for m in p.markers} | union("setters") | union("attributes"))
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
        )

"""What ``flowtrace probe engine`` knows about an engine: the ``[probe]`` table of its profile.

Engine knowledge is data (rules/engines/*.toml): the import package, the distribution each device
needs, the environment the engine process wants, the draft class the probe's tiny draft names and
the runner script (a file next to the profile) that drives the engine's own Python API. This
module reads and checks that table, so the rest of the probe names no engine. The draft is one
speculative method's (``[methods.<name>] probe_*`` keys, the profile's default method unless
``--method`` names another), so the rest of the probe names no method either.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from flowtrace.engines.methods import Scalar, SpecMethod, default_of, find_method
from flowtrace.engines.profiles import Profile, load_all
from flowtrace.errors import ProfileError
from flowtrace.probe.engine_runner import DraftSpec, EngineSpec
from flowtrace.probe.errors import ProbeError

DEVICES = ("cpu", "cuda")
_BUILD = re.compile(r"(?P<device>[a-z]+)=(?P<dist>[A-Za-z0-9_.-]+)(?:==(?P<version>[A-Za-z0-9_.+!-]+))?")
_ENV = re.compile(r"(?:(?P<device>[a-z]+):)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)")


@dataclass(frozen=True, slots=True)
class Build:
    """The distribution an engine venv must hold for one device (version None: any)."""

    device: str
    distribution: str
    version: str | None


@dataclass(frozen=True, slots=True)
class ProbeSettings:
    """One profile's ``[probe]`` table, checked."""

    engine: str
    package: str
    runner: Path
    builds: tuple[Build, ...]
    env: tuple[tuple[str, str, str], ...]  # (device or "", name, value)
    draft_architecture: str
    draft_model_type: str
    draft_ids_key: str
    id_keys: tuple[str, ...]  # [draft] layer_id_keys: where a draft config keeps its ids
    install: Path | None = None  # the venv install script next to the profile (None: the profile names none)
    method: str = ""  # the [methods.<name>] whose draft the probe writes ("": a profile without methods)
    method_default: bool = True  # that method is the profile's default (the static trace needs no --method)
    engine_method: str = ""  # the engine's word for that method in the speculative config ("": the script's own)
    draft_layout: str = ""  # the draft checkpoint's layout, a word of the runner ("": midlayer)
    draft_extra: tuple[tuple[str, Scalar], ...] = ()  # further draft-config keys (dotted)
    states: int | None = None  # the states the method's fc takes when a draft names no ids (a number) ...
    states_key: str = ""  # ... or the draft-config key holding that number

    def build(self, device: str) -> Build:
        for b in self.builds:
            if b.device == device:
                return b
        raise ProbeError(f"--device {device}: the {self.engine} profile's [probe] builds name no {device} build "
                         f"(it has: {', '.join(b.device for b in self.builds) or 'none'})")

    def env_for(self, device: str) -> dict[str, str]:
        """The variables the engine process gets for ``device`` (set there unless already set)."""
        return {name: value for dev, name, value in self.env if dev in ("", device)}

    def to_spec(self, device: str) -> EngineSpec:
        """The part of the runner's spec that tells it which engine to drive and how."""
        draft: DraftSpec = {"architectures": [self.draft_architecture], "model_type": self.draft_model_type}
        if self.draft_layout:
            draft["layout"] = self.draft_layout
        if self.draft_extra:
            draft["config"] = [[key, value] for key, value in self.draft_extra]
        spec: EngineSpec = {"engine": self.engine, "package": self.package, "runner": str(self.runner),
                            "env": self.env_for(device), "draft": draft, "id_keys": list(self.id_keys)}
        if self.engine_method:
            spec["method"] = self.engine_method
        return spec


def _builds(profile: Profile) -> tuple[Build, ...]:
    out = []
    for entry in profile.builds:
        m = _BUILD.fullmatch(entry)
        if not m or m["device"] not in DEVICES:
            raise ProbeError(
                f"{profile.path}: [probe] builds entry {entry!r}: expected DEVICE=DISTRIBUTION[==VERSION], "
                f"DEVICE one of {', '.join(DEVICES)}"
            )
        out.append(Build(m["device"], m["dist"], m["version"]))
    return tuple(out)


def _env(profile: Profile) -> tuple[tuple[str, str, str], ...]:
    out = []
    for entry in profile.env:
        m = _ENV.fullmatch(entry)
        if not m or (m["device"] and m["device"] not in DEVICES):
            raise ProbeError(f"{profile.path}: [probe] env entry {entry!r}: expected NAME=VALUE or DEVICE:NAME=VALUE")
        out.append((m["device"] or "", m["name"], m["value"]))
    return tuple(out)


def settings_of(profile: Profile, method: str | None = None) -> ProbeSettings:
    """The checked ``[probe]`` table of a profile that has one, with the draft of ``method`` (a
    ``[methods.<name>]`` by name or label; None: the profile's default method)."""
    where = f"{profile.path}: [probe]"
    if not profile.package:
        raise ProbeError(f"{where} has no package")
    runner = Path(profile.path).parent / profile.runner
    if not profile.runner or Path(profile.runner).name != profile.runner or not runner.is_file():
        raise ProbeError(f"{where} runner {profile.runner!r}: expected the name of a script next to the profile")
    install = Path(profile.path).parent / profile.install if profile.install else None
    if install is not None and (Path(profile.install).name != profile.install or not install.is_file()):
        raise ProbeError(f"{where} install {profile.install!r}: expected the name of a script next to the profile")
    chosen = _method(profile, method)
    draft = _draft_of(profile, chosen)  # checked before the builds and env, as each path always did
    extra: _MethodFields = _probe_extras(chosen) if chosen is not None else {}
    builds, env = _builds(profile), _env(profile)
    return ProbeSettings(profile.name, profile.package, runner, builds, env, *draft, install, **extra)


def _draft_of(profile: Profile, m: SpecMethod | None) -> tuple[str, str, str, tuple[str, ...]]:
    """The draft the probe writes: the profile's own (``[probe]``, ``[draft] layer_id_keys``) for
    its default method, a method's ``probe_draft_*`` keys for any other."""
    if m is None or m.default:
        where = f"{profile.path}: [probe]"
        return _draft(
            profile.draft_architecture, profile.draft_model_type, profile.draft_ids_key, profile.layer_id_keys,
            f"{where} has no draft_architecture (the draft class the engine loads the probe's draft with)",
            f"{where} has no draft_ids_key and [draft] has no layer_id_keys: the probe cannot hand a draft its ids",
        )
    where = f"{profile.path}: [methods.{m.name}]"
    return _draft(
        m.probe_draft_architecture, m.probe_draft_model_type, m.probe_draft_ids_key, m.layer_id_keys,
        f"--method {m.name}: {where} names no probe_draft_architecture, so `probe engine` has no "
        f"{m.title} draft to write for {profile.name} (docs/probe-engine.md, \"Other methods\")",
        f"{where} has no probe_draft_ids_key and no layer_id_keys: the probe cannot hand its draft the ids",
    )


def _draft(
    architecture: str, model_type: str, ids_key: str, layer_id_keys: tuple[str, ...], no_class: str, no_ids: str
) -> tuple[str, str, str, tuple[str, ...]]:
    """(architecture, model type, ids key, id keys) of a draft: the ids go under the key named,
    else the last layer-id key, and every layer-id key is written (``no_class`` / ``no_ids``:
    the errors when there is no class, or no key to hand the ids under)."""
    if not architecture:
        raise ProbeError(no_class)
    ids_key = ids_key or (layer_id_keys[-1] if layer_id_keys else "")
    if not ids_key:
        raise ProbeError(no_ids)
    return architecture, model_type, ids_key, tuple(dict.fromkeys((*layer_id_keys, ids_key)))


def _method(profile: Profile, name: str | None) -> SpecMethod | None:
    """The method whose draft the probe writes: the one named, else the profile's default."""
    served = profile.methods_served
    if name is None:
        return default_of(served) if served else None
    found = find_method(served, name)
    if found is None:
        names = ", ".join(m.name for m in served) or "no method"
        raise ProbeError(f"--method {name!r}: the {profile.name} profile serves {names}")
    return found


class _MethodFields(TypedDict, total=False):
    """The :class:`ProbeSettings` fields a speculative method decides."""

    method: str
    method_default: bool
    engine_method: str
    draft_layout: str
    draft_extra: tuple[tuple[str, Scalar], ...]
    states: int | None
    states_key: str


def _probe_extras(m: SpecMethod) -> _MethodFields:
    return {"method": m.name, "method_default": m.default, "engine_method": m.probe_engine_method,
            "draft_layout": m.probe_draft_layout, "draft_extra": m.probe_draft_config, "states": m.states,
            "states_key": m.states_key}


def probe_profiles(extra: tuple[Path, ...] = ()) -> dict[str, Profile]:
    """The profiles (bundled, plus the user's files) that say how to probe their engine."""
    try:
        profiles = load_all(extra=extra)
    except ProfileError as exc:
        raise ProbeError(str(exc)) from None
    return {p.name: p for p in profiles if p.runner or p.package}


def probe_settings(engine: str | None = None, extra: tuple[Path, ...] = (), method: str | None = None) -> ProbeSettings:
    """The settings of ``engine``, or of the only probe-able engine when none is named, with the
    draft of ``method`` (None: the profile's default method)."""
    found = probe_profiles(extra)
    names = ", ".join(sorted(found)) or "none"
    if engine is None:
        if len(found) != 1:
            raise ProbeError(f"give --engine: profiles with a [probe] table: {names}")
        (profile,) = found.values()
    elif engine not in found:
        raise ProbeError(f"--engine {engine!r}: no profile with a [probe] table by that name (have: {names})")
    else:
        profile = found[engine]
    return settings_of(profile, method)


def draft_class(engine: str | None = None) -> tuple[str, str]:
    """``(architectures[0], model_type)`` a written draft config names: ``engine``'s, or, without
    one, the pair every probe-able profile shares (several engines may load the same EAGLE-3
    layout under one name); engines that disagree need ``engine``."""
    if engine is not None:
        s = probe_settings(engine)
        return s.draft_architecture, s.draft_model_type
    pairs = {(p.draft_architecture, p.draft_model_type) for p in probe_profiles().values()}
    if len(pairs) != 1:
        names = ", ".join(sorted(probe_profiles())) or "none"
        raise ProbeError(f"give --engine: the profiles with a [probe] table ({names}) name different draft classes")
    (pair,) = pairs
    return pair


__all__ = ["Build", "ProbeSettings", "draft_class", "probe_profiles", "probe_settings", "settings_of"]

"""Speculative methods as profile data: the ``[methods.<name>]`` tables of an engine profile.

An engine feeds target hidden states to more than one kind of draft (EAGLE-3, DFlash, DSpark,
...): each reads the target's layers through its own setter (or the same one with other ids),
names its ids under its own draft-config keys, and falls back to its own default when a draft
names none. None of that is flowtrace's knowledge: a profile declares, per method, the names
and the conventions, and every analysis runs once per method with that method's values
(:mod:`flowtrace.analysis.methods`).

A profile written before methods existed declares none: its ``[capture] setters``,
``default_getters``, ``[draft] layer_id_keys`` and ``[config_capture] method`` are then its one
method, the one those keys have always described (:data:`LEGACY`). A profile that declares
methods may still write those keys: they fill what its default method leaves empty.

Keys of one ``[methods.<name>]`` table (all optional; docs/profiles.md is the reference):

- ``label``: how messages name the method ("DFlash"); default: the table's name.
- ``default``: the method answered when ``--method`` is not given (at most one per profile;
  none marked: the first declared).
- ``setters``, ``default_getters``: the method's entry setters (in the order the runner tries
  them) and default-id getters.
- ``layer_id_keys``: the draft-config keys the runner reads the ids from, in its order.
- ``id_offset``: what the runner adds to the draft's ids before it hands them to the setter.
- ``default_function``, ``default_arguments``: a function of the tree the runner calls for the
  ids when the draft names none, and what it passes (``layers``: the target's layer count;
  ``draft_layers``: the draft's).
- ``draft_layers_key``: the draft-config key the runner reads the draft's layer count from (what
  ``default_arguments`` passes as ``draft_layers``; compat reads it from the draft config).
- ``states``, ``states_key``: how many target states the method's draft concatenates when its
  config names no ids (a number, or the draft-config key holding it).
- ``runner_entries``: the runner functions that hand the ids to the setter.
- ``draft_architectures``, ``detect_keys``: what identifies a draft config of the method (its
  ``architectures``, keys present).
- ``engine_name``: the engine's own word for the method in its gates (``spec_method == ...``).
- ``draft_feeds``: build-context feeds that carry the draft's ids unchanged (an engine without
  a setter that fills its capture ids from the draft config for this method).
- ``training``: the training convention (``rules/training/``) the method's drafts use.
- ``embedding_id``: the id naming the embedding output in the method's id convention (unset:
  the profile's ``[checks] embedding_id``; ``none_embedding = true``: no id names it).
- ``startup_refusal``, ``target_methods``: as the ``[checks]`` keys, for this method.
- ``probe_draft_architecture``, ``probe_draft_model_type``, ``probe_draft_ids_key``: what
  ``probe engine --method`` writes into its tiny draft config.
- ``probe_draft_layout``: the checkpoint layout of that draft, a word of the probe's runner
  (``midlayer``, the default: one layer under ``midlayer.`` reading embedding and state side by
  side; ``layers``: a stack of decoder layers under ``layers.<i>.`` with a ``hidden_norm``).
- ``probe_draft_config``: a table of further keys written into that draft config (nested tables
  become nested objects); given, it replaces the runner's default extras.
- ``probe_engine_method``: the engine's word for the method in the speculative configuration
  the probe's runner script starts the engine with.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from typing import Any, Iterable

from flowtrace.errors import ProfileError

# What the keys written before methods existed describe: a profile that declares no method has
# this one, under this name and label (docs/profiles.md, "Methods").
LEGACY = ("eagle3", "EAGLE-3")

# What ``default_arguments`` may name: the values the runner passes the default function.
LAYERS, DRAFT_LAYERS = "layers", "draft_layers"
ARGUMENT_WORDS = (LAYERS, DRAFT_LAYERS)
# A value of a method's probe_draft_config table (nested tables are flattened to dotted keys).
Scalar = bool | int | float | str
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@dataclass(frozen=True, slots=True)
class SpecMethod:
    """One speculative method an engine serves (one ``[methods.<name>]`` table)."""

    name: str
    label: str = ""
    default: bool = False
    setters: tuple[str, ...] = ()
    default_getters: tuple[str, ...] = ()
    layer_id_keys: tuple[str, ...] = ()
    id_offset: int = 0
    default_function: str = ""
    default_arguments: tuple[str, ...] = ()
    draft_layers_key: str = ""
    states: int | None = None
    states_key: str = ""
    runner_entries: tuple[str, ...] = ()
    draft_architectures: tuple[str, ...] = ()
    detect_keys: tuple[str, ...] = ()
    engine_name: str = ""
    draft_feeds: tuple[str, ...] = ()
    training: str = ""
    embedding_id: int | None = None
    none_embedding: bool = False
    startup_refusal: str = ""
    target_methods: tuple[str, ...] = ()
    probe_draft_architecture: str = ""
    probe_draft_model_type: str = ""
    probe_draft_ids_key: str = ""
    probe_draft_layout: str = ""
    probe_draft_config: tuple[tuple[str, Scalar], ...] = ()  # (dotted key, value)
    probe_engine_method: str = ""

    @property
    def title(self) -> str:
        """The method as messages name it."""
        return self.label or self.name


_STRING_LISTS = frozenset(
    f.name
    for f in fields(SpecMethod)
    if f.name
    in {
        "setters",
        "default_getters",
        "layer_id_keys",
        "default_arguments",
        "runner_entries",
        "draft_architectures",
        "detect_keys",
        "draft_feeds",
        "target_methods",
    }
)
_INTS = frozenset({"id_offset", "states", "embedding_id"})
_BOOLS = frozenset({"default", "none_embedding"})
_TABLES = frozenset({"probe_draft_config"})
METHOD_KEYS = tuple(f.name for f in fields(SpecMethod) if f.name != "name")


def _value(key: str, value: object, where: str) -> Any:
    """One key of a method table, checked against its type."""
    if key in _STRING_LISTS:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ProfileError(f"{where} {key} must be a list of strings, found {value!r}")
        if key == "default_arguments" and (bad := [v for v in value if v not in ARGUMENT_WORDS]):
            raise ProfileError(
                f"{where} default_arguments: {', '.join(map(repr, bad))} (each must be one of"
                f" {', '.join(ARGUMENT_WORDS)})"
            )
        return tuple(value)
    if key in _INTS:
        if type(value) is not int:
            raise ProfileError(f"{where} {key} must be a int, found {type(value).__name__}")
        return value
    if key in _TABLES:
        if not isinstance(value, dict):
            raise ProfileError(f"{where} {key} must be a table, found {type(value).__name__}")
        return _flat(value, key, where)
    if key in _BOOLS:
        if type(value) is not bool:
            raise ProfileError(f"{where} {key} must be a bool, found {type(value).__name__}")
        return value
    if not isinstance(value, str):
        raise ProfileError(f"{where} {key} must be a str, found {type(value).__name__}")
    return value


def _flat(table: dict[str, Any], key: str, where: str, prefix: str = "") -> tuple[tuple[str, Scalar], ...]:
    """A table of scalars (nested tables allowed) as (dotted key, value) pairs, in order: a
    frozen, hashable form the runner turns back into nested objects."""
    out: list[tuple[str, Scalar]] = []
    for name, value in table.items():
        if isinstance(value, dict):
            out.extend(_flat(value, key, where, f"{prefix}{name}."))
        elif isinstance(value, (bool, int, float, str)):
            out.append((f"{prefix}{name}", value))
        else:
            raise ProfileError(f"{where} {key}.{prefix}{name}: a value must be a string, number, boolean or table, "
                               f"found {type(value).__name__}")
    return tuple(out)


def read_methods(table: object, where: str) -> tuple[SpecMethod, ...]:
    """The ``[methods]`` table of one profile: each sub-table one method, in declaration order."""
    if not isinstance(table, dict):
        raise ProfileError(
            f"{where}: [methods] must be a table of [methods.<name>] tables, found {type(table).__name__}"
        )
    out = []
    for name, body in table.items():
        here = f"{where}: [methods.{name}]"
        if not _NAME.fullmatch(name):
            raise ProfileError(f"{here}: a method name is 1-64 letters, digits, '_', '.' or '-'")
        if not isinstance(body, dict):
            raise ProfileError(f"{here} must be a table, found {type(body).__name__}")
        unknown = sorted(set(body) - set(METHOD_KEYS))
        if unknown:
            raise ProfileError(f"{here} has unknown key(s) {', '.join(unknown)} (known: {', '.join(METHOD_KEYS)})")
        values = {key: _value(key, value, here) for key, value in body.items()}
        if values.get("default_function") and not values.get("default_arguments"):
            raise ProfileError(
                f"{here} default_function needs default_arguments (what the runner passes it:"
                f" {', '.join(ARGUMENT_WORDS)})"
            )
        out.append(SpecMethod(name=name, **values))
    if sum(m.default for m in out) > 1:
        raise ProfileError(
            f"{where}: more than one method is marked default = true ({', '.join(m.name for m in out if m.default)})"
        )
    return tuple(out)


def with_legacy(methods: tuple[SpecMethod, ...], legacy: dict[str, Any], where: str) -> tuple[SpecMethod, ...]:
    """The profile's methods with the keys written before methods existed folded in: they are
    the default method's (the one method of a profile that declares none). A key set both
    ways must say the same."""
    if not methods:
        name, label = LEGACY
        return (SpecMethod(name=name, label=label, default=True, **legacy),)
    chosen = default_of(methods)
    changes: dict[str, Any] = {}
    for key, value in legacy.items():
        if not value:
            continue
        own = getattr(chosen, key)
        if own and own != value:
            raise ProfileError(
                f"{where}: [methods.{chosen.name}] {key} = {own!r} differs from the older key's {value!r}: write it"
                " once"
            )
        if not own:
            changes[key] = value
    chosen = replace(chosen, default=True, **changes)
    return tuple(chosen if m.name == chosen.name else m for m in methods)


def default_of(methods: Iterable[SpecMethod]) -> SpecMethod:
    """The method answered when none is asked for: the one marked default, else the first."""
    methods = tuple(methods)
    return next((m for m in methods if m.default), methods[0])


def merge_methods(per_profile: Iterable[tuple[SpecMethod, ...]]) -> tuple[SpecMethod, ...]:
    """The selected profiles' methods by name: lists joined in order, a scalar from the first
    profile that sets it; the default is the first profile's default."""
    by_name: dict[str, SpecMethod] = {}
    default_name = ""
    for methods in per_profile:
        if methods and not default_name:
            default_name = default_of(methods).name
        for m in methods:
            seen = by_name.get(m.name)
            by_name[m.name] = m if seen is None else _joined(seen, m)
    return tuple(replace(m, default=m.name == default_name) for m in by_name.values())


def _joined(a: SpecMethod, b: SpecMethod) -> SpecMethod:
    changes: dict[str, Any] = {}
    for f in fields(SpecMethod):
        left, right = getattr(a, f.name), getattr(b, f.name)
        if f.name in _STRING_LISTS:
            changes[f.name] = tuple(dict.fromkeys((*left, *right)))
        elif left in ("", None, False, ()) and right not in ("", None, False, ()):
            changes[f.name] = right
    return replace(a, **changes)


def find_method(methods: Iterable[SpecMethod], name: str) -> SpecMethod | None:
    """A method by its name or its label (case-insensitive)."""
    wanted = name.lower()
    return next((m for m in methods if wanted in (m.name.lower(), m.title.lower())), None)


__all__ = [
    "ARGUMENT_WORDS",
    "DRAFT_LAYERS",
    "LAYERS",
    "LEGACY",
    "METHOD_KEYS",
    "SpecMethod",
    "default_of",
    "find_method",
    "merge_methods",
    "read_methods",
    "with_legacy",
]

"""What the checks need to know about an engine, read from the profile's optional ``[checks]`` table.

Kept apart from :mod:`flowtrace.engines.profiles` (which owns the scan schema) so that the
rules' knowledge grows without touching what the index reads. Every key is optional: a
profile written before this table existed keeps working with the neutral defaults below.

Keys (all optional):

- ``target_methods``: every method the engine calls on an EAGLE-3 target model class (a
  wrapper that lacks one cannot serve a draft).
- ``draft_class_patterns``: regular expressions on class names of draft heads (MTP, NextN,
  EAGLE drafts): they are served *as* drafts, never as EAGLE-3 targets.
- ``non_target_patterns``: regular expressions on class names or registered architectures of
  models that do not decode autoregressively (block diffusion): never EAGLE-3 targets.
- ``speculative_entry_points``: the methods of a target that run while a draft is served;
  a forward path reached from none of them never feeds the draft.
- ``capture_families``: other capture families that write the same capture attribute,
  ``[{ name = "DFlash", setters = ["set_dflash_layers_to_capture"] }]``.
- ``embedding_id``: the draft-config id that names the embedding output (b = 0) in this
  engine's convention (-1 where ids mean "output of layer i", 0 where ids are boundaries).
- ``interface_holder_path``: the attributes the engine's interface setter walks from the
  model to the holder, each optional (``["language_model", "model"]``).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterable

from flowtrace.errors import ProfileError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@dataclass(frozen=True, slots=True)
class CaptureFamily:
    name: str
    setters: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CheckConventions:
    target_methods: tuple[str, ...] = ()
    draft_class_patterns: tuple[str, ...] = ()
    non_target_patterns: tuple[str, ...] = ()
    speculative_entry_points: tuple[str, ...] = ()
    capture_families: tuple[CaptureFamily, ...] = ()
    embedding_id: int | None = None
    interface_holder_path: tuple[str, ...] = ()

    def is_draft_class(self, name: str) -> bool:
        return any(re.search(p, name) for p in self.draft_class_patterns)

    def is_non_target(self, names: Iterable[str]) -> bool:
        return any(re.search(p, n) for p in self.non_target_patterns for n in names)

    def family_of(self, method: str) -> CaptureFamily | None:
        return next((f for f in self.capture_families if method in f.setters), None)


_LISTS = ("target_methods", "draft_class_patterns", "non_target_patterns", "speculative_entry_points", "interface_holder_path")


def _strings(value, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ProfileError(f"{where}: expected a list of strings")
    return tuple(value)


def _families(value, where: str) -> tuple[CaptureFamily, ...]:
    if not isinstance(value, list):
        raise ProfileError(f"{where}: expected a list of {{ name = str, setters = [str] }}")
    out = []
    for item in value:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise ProfileError(f"{where}: entries need {{ name = str, setters = [str] }}, found {item!r}")
        out.append(CaptureFamily(item["name"], _strings(item.get("setters", []), f"{where} {item['name']}.setters")))
    return tuple(out)


@lru_cache(maxsize=32)
def _load(path: str, digest: str) -> CheckConventions:  # digest: reload when the file changes
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return CheckConventions()  # profiles.load_profile already reported a bad file
    table = data.get("checks", {})
    if not isinstance(table, dict):
        raise ProfileError(f"{path}: [checks] must be a table")
    known = set(_LISTS) | {"capture_families", "embedding_id"}
    unknown = sorted(set(table) - known)
    if unknown:
        raise ProfileError(f"{path}: [checks] has unknown key(s) {', '.join(unknown)}")
    kwargs: dict = {k: _strings(table[k], f"{path}: [checks] {k}") for k in _LISTS if k in table}
    for key in ("draft_class_patterns", "non_target_patterns"):
        for pattern in kwargs.get(key, ()):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ProfileError(f"{path}: [checks] {key}: {pattern!r} is not a valid regular expression ({exc})") from None
    if "capture_families" in table:
        kwargs["capture_families"] = _families(table["capture_families"], f"{path}: [checks] capture_families")
    if "embedding_id" in table:
        if not isinstance(table["embedding_id"], int) or isinstance(table["embedding_id"], bool):
            raise ProfileError(f"{path}: [checks] embedding_id must be an integer")
        kwargs["embedding_id"] = table["embedding_id"]
    return CheckConventions(**kwargs)


def check_conventions(profiles) -> CheckConventions:
    """The union of the selected profiles' ``[checks]`` tables (the first profile's embedding id)."""
    loaded = [_load(p.path, p.digest) for p in profiles]
    if not loaded:
        return CheckConventions()

    def union(attr: str) -> tuple:
        return tuple(dict.fromkeys(x for c in loaded for x in getattr(c, attr)))

    ids = [c.embedding_id for c in loaded if c.embedding_id is not None]
    return CheckConventions(
        target_methods=union("target_methods"),
        draft_class_patterns=union("draft_class_patterns"),
        non_target_patterns=union("non_target_patterns"),
        speculative_entry_points=union("speculative_entry_points"),
        capture_families=union("capture_families"),
        embedding_id=ids[0] if len(set(ids)) == 1 else None,
        interface_holder_path=union("interface_holder_path"),
    )

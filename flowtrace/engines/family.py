"""Which engine family a tree belongs to, when its paths do not say: detection by content.

A profile's ``detect_paths`` name the engine's package (``<pkg>/<models folder>``). A
fork that renames its package matches none of them, and merging every profile then applies
another engine's conventions to it (its setters, its registry prefix). The family is better
told by what the tree *defines*: the interfaces, holders and opt-in bases its classes are,
the setters, default getters and hooks its functions are, the registry files it keeps — each
named by a profile. The profile whose names the tree defines most wins, and the package its
detect path names is mapped onto the tree's own (``pkg`` -> ``forkpkg``), so registry entries
resolve inside the fork. The choice and its reason travel with the scan result (the JSON's
``profile_choice``, the text header), so a user sees which conventions were applied and why.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from flowtrace.engines.profiles import Profile, detects, select_profiles

_MAX_FILE = 2_000_000  # bytes: larger sources are data, not model code
_SKIP_DIRS = frozenset(
    {".git", "__pycache__", "node_modules", ".venv", "venv", "site-packages", "tests", "test", "docs"}
)


class How:
    """How the profiles were chosen (a word in the output)."""

    FORCED = "forced"  # --profile
    USER = "user"  # --profile-file
    PATH = "path"  # a detect path exists
    CONTENT = "content"  # the tree defines the profile's names (a fork)
    ALL = "all"  # nothing decided: every profile merged


@dataclass(frozen=True, slots=True)
class ProfileChoice:
    """Which profiles a scan applied, how they were chosen and why (for people)."""

    names: tuple[str, ...]
    how: str
    reason: str
    package_map: tuple[tuple[str, str], ...] = ()  # (the profile's package, the tree's package)


def _signatures(p: Profile) -> dict[str, re.Pattern[bytes]]:
    """What defining a profile's names looks like in source: ``class X`` for the classes a
    model lists as bases, ``def f(`` for the methods the engine calls."""
    out: dict[str, re.Pattern[bytes]] = {}
    for name in (*p.interfaces, *p.holders, *p.opt_in_bases):
        out[f"class {name}"] = re.compile(rb"^\s*class\s+" + re.escape(name.encode()) + rb"\b", re.M)
    for name in (*p.setters, *p.default_getters, *p.hooks):
        out[f"def {name}"] = re.compile(rb"^\s*def\s+" + re.escape(name.encode()) + rb"\s*\(", re.M)
    for name in p.entry_variables:
        out[f"{name} ="] = re.compile(rb"^" + re.escape(name.encode()) + rb"\s*[:=]", re.M)
    return out


def _sources(root: Path) -> Iterator[Path]:
    """The tree's Python files (sorted, so the first evidence named is stable)."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        for name in sorted(files):
            if name.endswith(".py"):
                yield Path(folder) / name


def _evidence(root: Path, profiles: list[Profile]) -> dict[str, dict[str, str]]:
    """profile name -> {signature: the first file defining it}; a profile's registry files
    count as definitions too."""
    wanted = {p.name: _signatures(p) for p in profiles}
    found: dict[str, dict[str, str]] = {p.name: {} for p in profiles}
    for path in _sources(root):
        rel = path.relative_to(root).as_posix()
        for p in profiles:
            for suffix in p.dict_files:
                if rel.endswith(suffix):
                    found[p.name].setdefault(f"registry {suffix}", rel)
        try:
            if path.stat().st_size > _MAX_FILE:
                continue
            data = path.read_bytes()
        except OSError:
            continue
        for name, sigs in wanted.items():
            for label, pattern in sigs.items():
                if label not in found[name] and pattern.search(data):
                    found[name][label] = rel
    return found


def _package_map(root: Path, p: Profile, evidence: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """The profile's package -> the tree's: the folder that holds the detect path's tail
    (``sub/models`` of ``pkg/sub/models``) beside the evidence."""
    for detect in p.detect_paths:
        head, _, tail = detect.partition("/")
        if not tail:
            continue
        for rel in evidence.values():
            parts = rel.split("/")
            for n in range(len(parts) - 1):
                if (root.joinpath(*parts[: n + 1]) / tail).is_dir():
                    package = parts[n]
                    return ((head, package),) if package != head else ()
    return ()


def _mapped(p: Profile, mapping: tuple[tuple[str, str], ...]) -> Profile:
    """The profile with its package renamed (registry prefix), hashed apart from the original
    (the fact cache keys on the digest)."""
    if not mapping:
        return p
    prefix = p.dict_module_prefix
    for old, new in mapping:
        if prefix == old or prefix.startswith(old + "."):
            prefix = new + prefix[len(old):]
    digest = hashlib.sha256((p.digest + repr(mapping)).encode()).hexdigest()[:16]
    return dataclasses.replace(p, dict_module_prefix=prefix, digest=digest)


def by_content(root: Path, profiles: list[Profile]) -> tuple[list[Profile], ProfileChoice]:
    """The profile whose names the tree defines most (all of them when none or a tie)."""
    evidence = _evidence(root, profiles)
    scores = {name: len(found) for name, found in evidence.items()}
    best = max(scores.values(), default=0)
    winners = [p for p in profiles if scores[p.name] == best]
    if best == 0 or len(winners) != 1:
        why = (
            "no profile's interfaces, setters or hooks are defined here"
            if best == 0
            else f"a tie between {', '.join(p.name for p in winners)}"
        )
        return profiles, ProfileChoice(
            tuple(p.name for p in profiles), How.ALL, f"no detect path matched and {why}: every profile merged"
        )
    chosen = winners[0]
    found = evidence[chosen.name]
    mapping = _package_map(root, chosen, found)
    shown = "; ".join(f"{label} ({where})" for label, where in list(found.items())[:4])
    runners = ", ".join(f"{n} {s}" for n, s in sorted(scores.items()) if n != chosen.name)
    renamed = "; package " + ", ".join(f"{a} -> {b}" for a, b in mapping) if mapping else ""
    reason = (
        f"no detect path matched; the tree defines {best} of {chosen.name}'s names: {shown} (others:"
        f" {runners}){renamed}"
    )
    return [_mapped(chosen, mapping)], ProfileChoice((chosen.name,), How.CONTENT, reason, mapping)


def choose(root: Path, forced: str | None = None, extra: tuple[Path, ...] = ()) -> tuple[list[Profile], ProfileChoice]:
    """The profiles for a tree and why: ``--profile``, the user's profile files, a detect path
    that exists, else the tree's content (:func:`by_content`)."""
    profiles = select_profiles(root, forced, extra=extra)
    names = tuple(p.name for p in profiles)
    if forced:
        return profiles, ProfileChoice(names, How.FORCED, f"--profile {forced}")
    if extra:
        return profiles, ProfileChoice(
            names, How.USER, "the user's profile file(s) " + ", ".join(str(e) for e in extra)
        )
    if root.is_file():
        return profiles, ProfileChoice(names, How.ALL, "a single file: every profile merged")
    found = [f"{d}/" for p in profiles for d in p.detect_paths if detects(root, d)]
    if found:
        return profiles, ProfileChoice(names, How.PATH, "found " + ", ".join(found))
    return by_content(root, profiles)


__all__ = ["How", "ProfileChoice", "by_content", "choose"]

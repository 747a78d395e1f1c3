"""Which copy of a module a package selects at import time, and under which condition.

Engines ship per-platform copies of one model (``pkg/vendor_a/model.py``, ``pkg/vendor_b/model.py``)
and pick one in the package's ``__init__.py``::

    if platform.is_a():
        from .vendor_a.model import XForCausalLM
    elif platform.is_b():
        from .vendor_b.model import XForCausalLM
    else:
        from generic.x import XForCausalLM

A defect in the ``vendor_b`` copy only reaches a draft where that branch runs. This module reads
the nearest ancestor ``__init__.py`` that imports a file and returns the conditions of the
branches that import it, as the engine's own source text (no platform is named by flowtrace:
the condition is quoted). The shape is structural (imports nested in ``if``/``elif``/``else``),
so no engine knowledge is needed. ``TYPE_CHECKING`` branches never run and are left out.

The imports of the package ``__init__.py`` files and the tree's distribution names are facts
of the index (:mod:`flowtrace.index.packages`, ``IndexResult.packages`` / ``.distributions``),
read once with the other facts and keyed with them; nothing here reads a file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from flowtrace.index.packages import MAX_LEVELS as _MAX_LEVELS, normalised
from flowtrace.model.facts import IndexResult, Location

_NOT = "\0not "  # marks an excluded test (an else branch) in a conjunction


def build_test(index: IndexResult, builds: tuple[str, ...]) -> str | None:
    """The platform test that holds in this tree when it is a one-platform build named by the
    profile (``[checks] platform_builds``: ``"<dist-info Name>: <test>"``), else None."""
    names = set(index.distributions)
    for build in builds:
        name, _, test = build.partition(":")
        if normalised(name) in names and test.strip():
            return test.strip()
    return None


def runs_nowhere(chosen: Selection, test: str) -> bool:
    """In a build where ``test`` holds, every branch importing the copy needs another
    ``is_*()`` test of the same object: one current platform, so none of them runs."""
    obj = re.escape(test.split(".", 1)[0])
    other = re.compile(rf"{obj}\.is_\w+\(\)")

    def impossible(conj: tuple[str, ...]) -> bool:
        return any(c != test and other.fullmatch(c) for c in conj if not c.startswith(_NOT))

    return all(impossible(conj) for conj in chosen.alternatives)


def never_selected(index: IndexResult, file: str) -> Location | None:
    """The dispatching ``__init__.py`` of a package that picks between its subpackages under
    conditions and never names the subpackage holding ``file`` (a copy left behind: the
    registered name resolves to another copy on every platform); None otherwise."""
    parts = Path(file).with_suffix("").parts
    for up in range(2, min(_MAX_LEVELS, len(parts) - 1) + 1):
        package = parts[:-up]
        init = Path(*package, "__init__.py").as_posix()
        found = _imports(index, init)
        if not any(conds for _, conds, _ in found):
            continue  # no conditional import here: not a dispatch
        sub = parts[len(package)]
        absolute = ".".join((*package, sub))
        named = any(
            m == sub or m.startswith(sub + ".") or m == absolute or m.startswith(absolute + ".") for m, _, _ in found
        )
        return None if named else Location(init, 1)
    return None


@dataclass(frozen=True, slots=True)
class Selection:
    """A module imported only under conditions: each alternative is a conjunction of source
    texts (an excluded test, from an ``else``, marked), ``where`` the dispatching import."""

    alternatives: tuple[tuple[str, ...], ...]
    where: Location

    def words(self) -> str:
        """``when `a` or when `b```, for a message: a branch by its own test (the earlier tests
        it excludes are left out), an ``else`` by the tests it excludes."""
        return " or ".join(_conjunction(conj) for conj in self.alternatives)


def _conjunction(conj: tuple[str, ...]) -> str:
    positive = [c for c in conj if not c.startswith(_NOT)]
    if positive:
        return "when " + " and ".join(f"`{c}`" for c in positive)
    excluded = [f"`{c[len(_NOT):]}`" for c in conj]
    return "unless " + excluded[0] if len(excluded) == 1 else "unless one of " + ", ".join(excluded)


def selection(index: IndexResult, file: str) -> Selection | None:
    """How the package around ``file`` (a path relative to the root) selects it; None when it
    is imported unconditionally, or not imported by an ancestor ``__init__.py``."""
    parts = Path(file).with_suffix("").parts
    for up in range(1, min(_MAX_LEVELS, len(parts) - 1) + 1):
        package = parts[:-up]
        init = Path(*package, "__init__.py").as_posix()
        relative = ".".join(parts[len(package):])
        absolute = ".".join(parts)
        found = _imports(index, init)
        hits = [(conds, line) for module, conds, line in found if module in (relative, absolute)]
        if not hits:
            continue
        if any(not conds for conds, _ in hits):
            return None  # imported unconditionally somewhere: every platform runs it
        live = tuple(dict.fromkeys(conds for conds, _ in hits))
        return Selection(live, Location(init, min(line for _, line in hits)))
    return None


def _imports(index: IndexResult, init: str) -> tuple[tuple[str, tuple[str, ...], int], ...]:
    """(module, conditions, line) of every import ``init`` runs (index/packages.py): the module
    as dotted text relative to the package for relative imports (both ``from .a.b import X`` ->
    "a.b" and ``from .a import b`` -> "a.b"), each condition a test's source text, an excluded
    one (an ``else``) marked."""
    imports = next((p.imports for p in index.packages if p.path == init), ())
    out: list[tuple[str, tuple[str, ...], int]] = []
    for imp in imports:
        conds = tuple(b.test if b.holds else _NOT + b.test for b in imp.branches)
        out.append((imp.module, conds, imp.line))
        if imp.level:
            out.append((f"{imp.module}.{imp.name}".lstrip("."), conds, imp.line))
    return tuple(out)

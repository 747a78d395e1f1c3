"""Registries: which classes an engine registers, under which architectures, for which task.

A registry entry names a class as the engine's code writes it (a package that re-exports one
of several platform variants, an alias bound in an ``__init__``); which classes that means is
decided here, from :class:`ClassLookup` alone, so the rows, the rules and the tests that ask
"is this class registered, and for text generation?" share one answer. It reads the lookup and
nothing above it: construction and capture paths never decide what is registered.
"""

from __future__ import annotations

from functools import cached_property

from flowtrace.analysis.class_lookup import ClassLookup


class Registries:
    """The registered classes of one scan, read off its class lookup."""

    def __init__(self, lookup: ClassLookup) -> None:
        self.lookup = lookup

    @cached_property
    def _classes_of(self) -> dict[str, list[str]]:
        """Each registry target's classes, resolved once for both questions below."""
        return {target: self.registered_classes(target) for target in self.lookup.registry}

    @cached_property
    def architectures(self) -> dict[str, tuple[str, ...]]:
        """Registered class -> the architecture names it is registered under (sorted, distinct)."""
        out: dict[str, set[str]] = {}
        for target, entries in self.lookup.registry.items():
            for found in self._classes_of[target]:
                out.setdefault(found, set()).update(e.architecture for e in entries)
        return {q: tuple(sorted(names)) for q, names in out.items()}

    @cached_property
    def generation(self) -> frozenset[str]:
        """Classes registered where the engine serves text generation (where EAGLE-3 applies):
        any entry outside a registry dict, or in a dict the profile names a generation dict
        (every dict when the profile names none)."""
        groups = self.lookup.conv.generation_dicts
        out: set[str] = set()
        for target, entries in self.lookup.registry.items():
            if any(e.kind != "registry_dict" or not groups or e.group in groups for e in entries):
                out.update(self._classes_of[target])
        return frozenset(out)

    def registered_classes(self, target: str) -> list[str]:
        """The classes a registry entry names: what the named package's ``__init__`` binds the
        name to (each platform's branch: an alias of another class, a class of another package
        of the engine), else the one it resolves to, else every same-named variant inside the
        package (an ``__init__`` not read)."""
        module, _, simple = target.rpartition(".")
        bound = self._reexported(module, simple)
        if bound:
            return bound
        found = self.lookup.find_class(target)
        if found:
            return [found]
        return sorted(c for c in self.lookup.by_name.get(simple, []) if module and c.startswith(module + "."))

    def _reexported(self, module: str, name: str, depth: int = 0) -> list[str]:
        """The classes ``module``'s ``__init__`` binds ``name`` to, through further packages."""
        out: list[str] = []
        for qualified in self.lookup.reexports.get(module, {}).get(name, []) if depth < 4 else ():
            inner_module, _, inner = qualified.rpartition(".")
            found = self._reexported(inner_module, inner, depth + 1) or (
                [q] if (q := self.lookup.find_class(qualified, near=module + ".")) else []
            )
            out.extend(c for c in found if c not in out)
        return sorted(out)

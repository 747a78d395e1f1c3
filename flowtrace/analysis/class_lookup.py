"""Class lookup: every fact of one scan indexed by class, and a written name pinned to one class.

Per-file facts name classes as their code writes them (a simple name, a relative import, a
package that re-exports one of several platform variants, ``arch:`` for a factory handed an
architecture name). Everything downstream (holders, capture chains, rows) asks here which
class a name means and in which order a class's bases are searched, so the answer is
decided in one place.
"""

from __future__ import annotations

from functools import cached_property

from flowtrace.analysis.source_index import SourceIndex
from flowtrace.engines.profiles import Conventions
from flowtrace.index.stream_facts import EARLY_RETURN, FOLDS_RESIDUAL
from flowtrace.model import facts as F


def _nearest(candidates: list[str], near: str) -> str | None:
    """The one candidate sharing the longest dotted prefix with ``near`` (None on a tie)."""
    def shared(c: str) -> int:
        n = 0
        for a, b in zip(c.split("."), near.split(".")):
            if a != b:
                break
            n += 1
        return n

    ranked = sorted(((shared(c), c) for c in candidates), reverse=True)
    if not ranked or (len(ranked) > 1 and ranked[0][0] == ranked[1][0]):
        return None
    return ranked[0][1]


class ClassLookup:
    """All facts of one scan, indexed for lookups by class."""

    def __init__(self, files: tuple[F.FileFacts, ...], conv: Conventions) -> None:
        self.files = files
        self.conv = conv
        self.classes: dict[str, F.ClassFact] = {}
        self.by_name: dict[str, list[str]] = {}
        self.setters: dict[str, dict[str, F.SetterFact]] = {}
        self.getters: dict[str, F.DefaultGetterFact] = {}
        self.sites: dict[str, list[F.CaptureSiteFact]] = {}
        self.callbacks: dict[str, list[F.CallbackUse]] = {}
        self.registry: dict[str, list[F.RegistryFact]] = {}
        self.helpers: dict[str, dict[str, F.HelperDefFact]] = {}
        self.output_uses: dict[str, list[F.OutputUseFact]] = {}
        self.return_shapes: dict[str, list[F.ReturnShapeFact]] = {}
        self.flag_defaults: dict[str, list[F.FlagDefaultFact]] = {}
        self.early_returns: dict[str, list[F.StreamFact]] = {}
        self.folding: set[str] = set()  # layer classes whose forward returns the stream with the residual added
        self.reexports: dict[str, dict[str, list[str]]] = {}  # package -> name -> what its __init__ binds it to
        self._mro_cache: dict[str, list[str]] = {}
        self._found: dict[tuple[str, str | None], str | None] = {}
        for ff in files:
            for c in ff.classes:
                self.classes.setdefault(c.qualname, c)
                self.by_name.setdefault(c.name, []).append(c.qualname)
            for s in ff.setters:
                self.setters.setdefault(s.class_qualname, {})[s.method] = s
            for g in ff.default_getters:
                self.getters.setdefault(g.class_qualname, g)
            for site in ff.capture_sites:
                self.sites.setdefault(site.class_qualname, []).append(site)
            for cb in ff.callback_uses:
                self.callbacks.setdefault(cb.parameter, []).append(cb)
            for r in ff.registry:
                self.registry.setdefault(r.target, []).append(r)
            for h in ff.helper_defs:
                self.helpers.setdefault(h.class_qualname, {})[h.method] = h
            for imp in ff.reexports:
                self.reexports.setdefault(ff.module, {}).setdefault(imp.local, []).append(imp.qualified)
            self._index_returns(ff)

    def _index_returns(self, ff: F.FileFacts) -> None:
        """Return-path facts by class (link 6, analysis/return_path.py)."""
        for u in ff.output_uses:
            self.output_uses.setdefault(u.class_qualname, []).append(u)
        for r in ff.return_shapes:
            self.return_shapes.setdefault(r.class_qualname, []).append(r)
        for d in ff.flag_defaults:
            self.flag_defaults.setdefault(d.class_qualname, []).append(d)
        for s in ff.stream_facts:
            if s.kind == EARLY_RETURN:
                self.early_returns.setdefault(s.class_qualname, []).append(s)
            self.folding.update(f.class_qualname for f in ff.stream_facts if f.kind == FOLDS_RESIDUAL)

    @cached_property
    def sources(self) -> SourceIndex:
        """The setter-less source facts by class: built on first use, since only config-attribute,
        build-context and hook engines ask (a setter engine's scan never builds it)."""
        return SourceIndex(self.files)

    @cached_property
    def fcs(self) -> dict[str, F.FcFact]:
        """The draft fc each class defines (the last one its file lists), by class."""
        return {fc.class_qualname: fc for ff in self.files for fc in ff.fc_definitions}

    def find_class(self, name: str, near: str | None = None) -> str | None:
        """The class ``name`` means. ``near`` is the class whose code names it: when the name
        points at a package that re-exports one of several same-named variants (one per
        platform, picked by its ``__init__``), the variant beside ``near`` is the one built
        with it (each variant's wrapper and language model come from the same branch).
        Memoised: the facts never change after indexing, and the rules ask for the same
        names again and again (12,300 calls for 2,200 distinct questions in one SGLang scan)."""
        key = (name, near)
        if key in self._found:
            return self._found[key]
        found = self._found[key] = self._find_class(name, near)
        return found

    def _find_class(self, name: str, near: str | None) -> str | None:
        if name in self.classes:
            return name
        if name.startswith("arch:"):  # a factory given an architecture name: ask the registry
            for target, entries in self.registry.items():
                if any(e.architecture == name[5:] for e in entries):
                    return self.find_class(target, near) if not target.startswith("arch:") else None
            return None
        simple = name.rsplit(".", 1)[-1]
        candidates = self.by_name.get(simple, [])
        if len(candidates) == 1:
            return candidates[0]
        # Prefer a candidate in the module the name points at (re-exports, relative imports).
        module = name.rpartition(".")[0]
        close = [c for c in candidates if module and c.startswith(module.rpartition(".")[0])]
        if len(close) == 1:
            return close[0]
        inside = [c for c in close if c.startswith(module + ".")]
        return _nearest(inside, near) if near else None

    def mro(self, qualname: str) -> list[str]:
        """Depth-first base order (memoised: the facts never change after indexing)."""
        cached = self._mro_cache.get(qualname)
        if cached is None:
            cached = self._mro_cache[qualname] = self._compute_mro(qualname)
        return list(cached)

    def _compute_mro(self, qualname: str) -> list[str]:
        order: list[str] = []

        def visit(q: str, depth: int) -> None:
            if q in order or depth > 30:
                return
            order.append(q)
            cls = self.classes.get(q)
            if cls is None:
                return
            for base in cls.bases:
                found = self.find_class(base)
                if found:
                    visit(found, depth + 1)

        visit(qualname, 0)
        return order

    def find_setter(self, qualname: str, names: tuple[str, ...] | None = None) -> F.SetterFact | None:
        mro = self.mro(qualname)
        for name in names or self.conv.setter_order:
            for q in mro:
                setter = self.setters.get(q, {}).get(name)
                if setter is not None:
                    return setter
        return None

    def named_here(self, name: str) -> bool:
        """``name`` means a class of this tree, not a library's (``torch.nn.LayerNorm`` is
        not the tree's ``LayerNorm``): its simple name is defined here and its module is one
        of the tree's, under the tree's package or another one (a copy whose absolute
        imports still name the original package: ``pkg.models.x`` for ``copy.models.x``)."""
        module, _, simple = name.rpartition(".")
        if simple not in self.by_name:
            return False
        if not module:
            return True
        head, _, rest = module.partition(".")
        modules = {q.rpartition(".")[0] for q in self.by_name[simple]}
        return any(m.partition(".")[0] == head for m in modules) or any(
            m == rest or m.endswith("." + rest) for m in modules if rest
        )

"""Which classes a served draft can reach: paths from registered entries the engine accepts.

A defect only matters when the engine runs it for a draft. The engine starts from a
registered generation class (the profile's registry), calls its setter with the draft's ids
at start-up and then runs the speculative entry points (the profile's
``speculative_entry_points``, usually ``forward``). Code reached from no such entry (a module
no registration names, an inner model built only by a wrapper the engine refuses at
start-up, a draft head) never feeds a draft: findings there are ``unreachable``.

The path is kept (entry, then each class followed: bases, the classes the setter acts on,
the holder and the capture site's class), so an error can say how a draft gets there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from flowtrace.model.links import LayoutLink, Production

if TYPE_CHECKING:
    from flowtrace.analysis.resolve import ModelRow, Project


_MAX_DEPTH = 4  # entry -> wrapper -> model -> layer -> sub-module: deep enough for every capture


@dataclass(frozen=True, slots=True)
class Path:
    """How a draft reaches a class: the entry first, the class last."""

    entry: str
    steps: tuple[str, ...]

    def words(self) -> str:
        return " -> ".join(q.rsplit(".", 1)[-1] for q in self.steps)


def _rank(path: Path, target: str) -> tuple[int, int]:
    """Which of two paths to a class to show: the shorter, then one whose entry is defined in
    the class's own module (the model's causal LM rather than a wrapper elsewhere)."""
    same_module = path.entry.rpartition(".")[0] == target.rpartition(".")[0]
    return (len(path.steps), 0 if same_module else 1)


def accepts_draft(row: ModelRow) -> bool:
    """The engine gets past start-up with a draft for this row: it has a capture path (a
    setter that resolves, or a setter-less id source). A row without one is refused."""
    return row.chain is not None


class Reachability:
    """Classes reached from the accepted entries (``is_entry`` says which rows are served)."""

    def __init__(self, project: Project, is_entry: Callable[[ModelRow], bool]) -> None:
        self.project = project
        self._paths: dict[str, Path] = {}
        self._modules: dict[str, str] = {}  # module -> an accepted entry defined in it
        # Bases before their subclasses (fewer classes on the MRO first), so a path names the
        # class that defines the chain (LlamaForCausalLM) rather than a thin subclass of it.
        for row in sorted(project.rows, key=lambda r: (len(project.lookup.mro(r.qualname)), r.qualname)):
            if row.registered and accepts_draft(row) and is_entry(row):
                self._walk(row)
                self._modules.setdefault(row.qualname.rpartition(".")[0], row.qualname)

    def _walk(self, row: ModelRow) -> None:
        """Record every class the row's capture chain runs, with the path to it."""
        entry = row.qualname
        order: list[tuple[str, tuple[str, ...]]] = [(entry, (entry,))]
        capture = row.capture
        if capture is not None:
            for target in capture.chain_targets:
                order.append((target, (entry, target)))
            if capture.holder:
                order.append((capture.holder, (entry, capture.holder)))
            if capture.site is not None:
                via = (entry, capture.holder) if capture.holder else (entry,)
                order.append((capture.site.class_qualname, (*via, capture.site.class_qualname)))
        chain = row.chain
        if chain is not None and chain.site is not None:
            site_class = getattr(chain.site, "class_qualname", None)
            if isinstance(site_class, str):
                order.append((site_class, (entry, site_class)))
        for qualname, steps in order:
            self._mark(entry, qualname, steps)
        self._built(entry, entry, (entry,), depth=0)

    def _mark(self, entry: str, qualname: str, steps: tuple[str, ...]) -> None:
        for base in self.project.lookup.mro(qualname) or [qualname]:
            path = steps if base == qualname else (*steps, base)
            found = Path(entry, tuple(dict.fromkeys(path)))
            known = self._paths.get(base)
            if known is None or _rank(found, base) < _rank(known, base):
                self._paths[base] = found

    def _built(self, entry: str, qualname: str, steps: tuple[str, ...], depth: int) -> None:
        """The modules an instance builds in ``__init__`` run inside its forward (the
        speculative entry point): follow them, with ``self.<x>_cls``-style class attributes
        resolved on the building class (a subclass choosing its inner model)."""
        if depth >= _MAX_DEPTH:
            return
        for built in self._constructed(qualname):
            if built in steps:
                continue
            seen = built in self._paths
            self._mark(entry, built, (*steps, built))
            if not seen:
                self._built(entry, built, (*steps, built), depth + 1)

    def _constructed(self, qualname: str) -> list[str]:
        project = self.project
        out: list[str] = []
        for q in project.lookup.mro(qualname):
            cls = project.lookup.classes.get(q)
            if cls is None:
                continue
            for a in cls.assignments:
                callee = a.callee
                if callee.startswith("self.") and "." not in callee[5:]:
                    found = project.holders.attribute_class(qualname, callee[5:])
                else:
                    found = project.lookup.find_class(callee, near=q)
                if found and found not in out:
                    out.append(found)
        return out

    def path_to(self, qualname: str | None) -> Path | None:
        """The path from an accepted entry to a class (or to the class of ``Class.method``)."""
        if not qualname:
            return None
        if qualname in self._paths:
            return self._paths[qualname]
        owner = qualname.rsplit(".", 1)[0]
        if owner in self._paths:
            return self._paths[owner]
        return self._beside_entry(owner if owner in self.project.lookup.classes else qualname)

    def _beside_entry(self, qualname: str) -> Path | None:
        """A class defined in the module of an accepted entry: the entry may build it in a way
        the facts do not follow (a subclass's ``model_cls = ...`` class attribute), so it
        counts as reached rather than silenced."""
        module = qualname.rpartition(".")[0]
        entry = self._modules.get(module)
        return Path(entry, (entry, qualname)) if entry is not None and qualname in self.project.lookup.classes else None

    def reached(self) -> frozenset[str]:
        return frozenset(self._paths)


# Layer counts a served target may have: enough to see whether a fixed layout can name an index.
_LAYER_COUNTS = range(4, 161)


def fixed_layout(row: ModelRow) -> LayoutLink | None:
    """The layout the engine writes itself when the draft's ids are never read (a config
    builder's constant); None when a draft's ids reach the capture attribute."""
    chain = row.chain
    if row.capture is not None or chain is None or chain.production.kind is not Production.BUILDER_LAYOUT:
        return None
    return chain.production.layout


def layout_can_name(write: LayoutLink, index: int) -> bool | None:
    """Whether an engine-written layout contains ``index`` for some layer count (None: the
    expression could not be evaluated, so the caller keeps its finding)."""
    from flowtrace.model.safe_eval import CannotEvaluate, evaluate, normalise

    decided = False
    for layers in _LAYER_COUNTS:
        names: dict[str, object] = {}
        for name, expression in write.bindings:
            try:
                names[normalise(name)] = evaluate(expression, names)
            except CannotEvaluate:
                names[normalise(name)] = layers  # an unknown the layout is built from: the layer count
        try:
            value = evaluate(write.expression, names)
        except CannotEvaluate:
            continue
        if not isinstance(value, (list, tuple)):
            continue
        decided = True
        if index in value:
            return True
    return False if decided else None

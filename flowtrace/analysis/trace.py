"""Which boundaries will an engine capture for one model class and concrete ids?

The trace composes what the index found, step by step, on concrete values:

config ids -> each setter in the delegation chain (run by the safe evaluator, recording the
branch taken and why) -> capture indices -> the loop's reachable indices -> capture point ->
boundaries (0 = embedding, k = output of layer k-1, L = last layer before the final norm),
in loop order -> concatenation -> fc width.

Every step carries the file:line it rests on, so a reader can check it against the code.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import textwrap
from functools import lru_cache
from dataclasses import dataclass
from typing import Any, Callable, NoReturn

from flowtrace.model import facts as F
from flowtrace.analysis.attribute_flow import nothing_recorded
from flowtrace.analysis.boundaries import Drop, DropReason, Raise, RaiseKind, Slot, delta_slots, layout, offset
from flowtrace.analysis.function_interpreter import FunctionRun, run_function
from flowtrace.analysis.last_memo import LastMemo
from flowtrace.model.safe_eval import CannotEvaluate, LayerStack, evaluate
from flowtrace.analysis.resolve import ModelRow, Project
from flowtrace.analysis.runner_calls import runner_verdicts
from flowtrace.engines.profiles import Conventions
from flowtrace.analysis.serving_phase import BatchPath, PhaseTrace, serving_phase
from flowtrace.model.links import (
    NO_SERVING,
    NOT_BREAKING,
    CaptureChain,
    ConcatLink,
    Decision,
    Production,
    ProductionLink,
    SiteLink,
    StoreKind,
    StreamLink,
    TransformLink,
    Unmatched,
)


@dataclass(frozen=True, slots=True)
class TraceStep:
    kind: str  # config | setter | branch | attribute | loop | point | dropped | boundaries | stream | slots | concat
    text: str
    location: F.Location | None = None
    index: int | None = None  # the capture index a ``dropped`` step is about (readers select on it, not the text)


@dataclass(frozen=True, slots=True)
class TraceResult:
    model: str
    num_layers: int
    layer_ids: tuple[int, ...] | None  # None: the engine's default
    capture_indices: tuple[int, ...] | None
    boundaries: tuple[int, ...] | None  # capture (loop) order; None when undecidable or the engine raises
    dropped: tuple[tuple[int, str], ...]
    steps: tuple[TraceStep, ...]
    problems: tuple[str, ...]
    hidden_size: int | None = None
    outcome: F.Outcome = F.Outcome.UNKNOWN
    raises_at: F.Location | None = None
    reason: str | None = None
    # Buffer slots the fc reads that hold no boundary (hook engines: the post-final-norm id,
    # ids no layer matches): they count in the fc width all the same.
    extra_slots: int = 0
    # The serving phase (flowtrace.analysis.serving_phase): what each phase records when the
    # runner holds other ids than the draft's in it (graph replay, after a weight reload), and
    # the batches whose forward path runs layers without the capture. The fields above answer
    # for the draft's ids as the runner hands them (prefill).
    phases: tuple[PhaseTrace, ...] = ()
    batch_paths: tuple[BatchPath, ...] = ()
    # What each recorded state is, in read-back order (outcomes captures and captures_deltas):
    # a boundary, or (a delta stream) the output of a layer without its residual.
    slots: tuple[Slot, ...] = ()

    @property
    def ok(self) -> bool:
        return self.outcome == F.Outcome.CAPTURES

    @property
    def fc_in_features(self) -> int | None:
        states = len(self.boundaries) if self.boundaries is not None else len(self.slots) if self.slots else None
        if states is None or self.hidden_size is None:
            return None
        return (states + self.extra_slots) * self.hidden_size

    @property
    def named_boundaries(self) -> tuple[int, ...] | None:
        """The boundaries the capture indices name: ``boundaries``, or on a delta stream the
        boundary each slot stands at (layer k's output at b = k + 1). The layout rules compare
        these (which layers the ids pick); what the stream holds there is FT013's concern."""
        if self.outcome != F.Outcome.CAPTURES_DELTAS:
            return self.boundaries
        return tuple(s.boundary if s.boundary is not None else (s.layer_value_of or 0) + 1 for s in self.slots)


def describe_boundary(b: int, num_layers: int) -> str:
    if b == 0:
        return "b=0 (embedding)"
    if b == num_layers:
        return f"b={b} (last layer's output, before the final norm)"
    return f"b={b} (output of layer {b - 1})"


# The Hugging Face config's layer counts (config.json, ``PretrainedConfig``; a composite config
# keeps its text model's under ``text_config``): the checkpoint format every engine loads and
# ``compat`` reads, not one engine's spelling.
_CONFIG_OBJECTS = ("config", "text_config")
_CONFIG_LAYER_COUNTS = ("num_hidden_layers", "num_layers")


@dataclass(frozen=True, slots=True)
class ModelNames:
    """The model's own attributes a setter or default getter may read besides the ids, as the
    profiles name them: its decoder-layer list (``[capture] layers_attribute``), its layer count
    (``[capture] layer_count_attributes``) and its pipeline stage (``[draft]
    stage_start_attributes`` and ``stage_end_attributes``): what each means, not what an
    engine calls it."""

    layer_lists: tuple[str, ...] = ()
    layer_counts: tuple[str, ...] = ()
    stage_starts: tuple[str, ...] = ()
    stage_ends: tuple[str, ...] = ()

    @classmethod
    def of(cls, conv: Conventions) -> ModelNames:
        """The names ``conv`` gives, built once per conventions object: every setter run and
        default getter of a scan asks with the same one, frozen, so its names cannot change."""
        return _NAMES.get(conv, _model_names)

    def own(self, name: str) -> str | None:
        """The kind of value ``self.<name>`` stands for: a layer count (``count``), a stage start
        (``zero``), or None. The traced rank holds every layer: a stage runs from 0 to L."""
        if name in self.layer_counts or name in self.stage_ends:
            return "count"
        return "zero" if name in self.stage_starts else None


def _model_names(conv: Conventions) -> ModelNames:
    return ModelNames(
        tuple(sorted(conv.layers_attributes)),
        tuple(sorted(conv.layer_count_attributes)),
        tuple(sorted(conv.stage_start_attributes)),
        tuple(sorted(conv.stage_end_attributes)),
    )


_NAMES: LastMemo[Conventions, ModelNames] = LastMemo()  # the last conventions object's names


def _rooted(node: ast.expr) -> bool:
    """``name`` or ``name.a.b``: an object the code reaches from ``self`` or a local."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _last_name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


def _self_attribute(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"


def _attribute_kind(node: ast.Attribute, model: ModelNames) -> str | None:
    """What an attribute read stands for: the layer list of any object the code reaches, a config's
    layer count, or one of the model's own attributes the profile names."""
    if node.attr in model.layer_lists and _rooted(node.value):
        return "stack"
    if node.attr in _CONFIG_LAYER_COUNTS and _rooted(node.value) and _last_name(node.value) in _CONFIG_OBJECTS:
        return "count"
    return model.own(node.attr) if _self_attribute(node) else None


_Site = tuple[str, str, tuple[str, str] | None]  # (ast.unparse text, kind, payload)


def _hasattr_payload(node: ast.Call) -> tuple[str, str] | None:
    """(owner, attribute) of ``hasattr(self, "x")`` or ``hasattr(self.m, "x")``: the classes decide those."""
    if len(node.args) < 2:
        return None
    name = node.args[1]
    if not isinstance(name, ast.Constant) or not isinstance(name.value, str):
        return None
    owner = ast.unparse(node.args[0])
    return (owner, name.value) if owner == "self" or (owner.startswith("self.") and owner.count(".") == 1) else None


def _node_site(node: ast.AST, pp_guards: tuple[str, ...], model: ModelNames) -> _Site | None:
    """The binding a call or attribute read of a setter needs (``x is None`` tests aside)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("hasattr", "getattr"):
        return ast.unparse(node), node.func.id, _hasattr_payload(node) if node.func.id == "hasattr" else None
    if isinstance(node, ast.Attribute) and node.attr in pp_guards:
        return ast.unparse(node), "guard", None
    if isinstance(node, ast.Attribute) and (kind := _attribute_kind(node, model)) is not None:
        return ast.unparse(node), kind, None
    return None


@lru_cache(maxsize=4096)
def _source_sites(source: str, pp_guards: tuple[str, ...], model: ModelNames) -> tuple[_Site, ...]:
    """The expressions of one setter that need a binding, parsed once per source and walked once.

    An ``x is ...`` test needs one only when ``x`` is a delegate (a ``self.<a>`` the code calls a
    method of, which the chain resolved); the delegates are known at the end of the walk, so the
    tests wait for them there, in their places."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except (SyntaxError, ValueError, RecursionError):
        return ()
    delegates: set[str] = set()
    sites: list[_Site] = []
    tested: list[tuple[int, str]] = []  # (position in sites, the object tested) of each `x is ...`
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _self_attribute(node.func.value):
            delegates.add(ast.unparse(node.func.value))
        site = _node_site(node, pp_guards, model)
        if site is None and isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Is):
            tested.append((len(sites), ast.unparse(node.left)))
            site = (ast.unparse(node), "is-none", None)
        if site is not None:
            sites.append(site)
    dropped = {position for position, tested_object in tested if tested_object not in delegates}
    return tuple(site for position, site in enumerate(sites) if position not in dropped)


def _bindings(
    num_layers: int,
    source: str,
    pp_guards: tuple[str, ...],
    model: ModelNames,
    has_attribute: Callable[[str, str], bool] | None = None,
) -> dict[str, object]:
    """What the setter's free expressions mean for a target with ``num_layers`` layers.

    A layer list of any object the code reaches is a stack of L layers, a config's layer count
    and the model's own counts (the profile's names) are L, a pipeline stage runs from 0 to L;
    pipeline guards take the last-rank path (the rank that owns the draft); ``hasattr(self, x)``
    and ``hasattr(self.m, x)`` are decided from the classes, other ``hasattr`` and ``is None``
    checks on delegates take the delegating path, since the chain was resolved before tracing.
    """
    values: dict[str, object] = {"stack": LayerStack(num_layers), "count": num_layers, "zero": 0}
    names: dict[str, object] = {}
    for text, kind, payload in _source_sites(source, tuple(pp_guards), model):
        if kind in values:
            names[text] = values[kind]
        elif kind == "hasattr":
            names[text] = has_attribute(*payload) if (has_attribute and payload is not None) else True
        elif kind == "getattr":
            # `holder = getattr(parent, "model", parent)`: whichever object it picks holds the layers.
            names[text] = LayerStack(num_layers)
        elif kind == "guard":
            names[text] = True
        elif kind == "is-none":
            names[text] = False  # `self.language_model is None` before `self.language_model.f(...)`
    return names


def default_from_getter(
    project: Project, qualname: str, num_layers: int, depth: int = 0
) -> tuple[F.DefaultGetterFact, tuple[int, ...] | None, str | None] | None:
    """(getter, ids or None, reason) from the class's default-layer getter, following a
    getter that returns another object's getter; None when the class has no getter.

    Only the returned expression is evaluated, with each local that counts layers
    (``num_layers = len(holder.layers)``) bound to L: the surrounding holder lookup is
    dynamic and not needed for the value."""
    getters = project.lookup.getters
    getter = next((getters[q] for q in project.lookup.mro(qualname) if q in getters), None)
    if getter is None or depth > 4:
        return None
    expression = getter.expression or ""
    try:
        call = ast.parse(expression, mode="eval").body if expression else None
    except SyntaxError:
        call = None
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == getter.method:
        owner = ast.unparse(call.func.value)
        if owner.startswith("self.") and owner.count(".") == 1:
            target = project.holders.attribute_class(qualname, owner[5:])
            if target:
                inner = default_from_getter(project, target, num_layers, depth + 1)
                if inner is not None:
                    return inner
        return getter, None, f"returns {expression}, whose class could not be resolved"
    model = ModelNames.of(project.conv)
    names: dict[str, object] = _bindings(num_layers, expression, (), model)
    try:
        tree = ast.parse(textwrap.dedent(getter.source))
    except SyntaxError:
        tree = None
    counted = model.layer_lists + _CONFIG_LAYER_COUNTS
    for node in ast.walk(tree) if tree else ():
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            text = ast.unparse(node.value)
            if any(name in text for name in counted):
                names[node.targets[0].id] = num_layers
    try:
        value = evaluate(expression, names)
    except CannotEvaluate as exc:
        return getter, None, str(exc)
    ids = _as_ids(value)
    return getter, ids, None if ids is not None else f"{expression} is not a list of ints"


def _as_ids(value: object) -> tuple[int, ...] | None:
    if isinstance(value, (list, tuple, set, frozenset)) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        return tuple(value) if not isinstance(value, (set, frozenset)) else tuple(sorted(value))
    return None


class _Stop(Exception):
    """A link ended the trace (its outcome and reason are already recorded)."""


class _Tracer:
    """Evaluates one row's capture chain on concrete ids, one phase per link (docs/architecture.md);
    each phase adds its steps (with file:line) and may end the trace with an outcome.

    Every id source goes through the same phases: the id source (link 1), id production
    (link 2, dispatching on :class:`Production`), the store and the site (links 3-4), the
    point, the boundaries (:func:`flowtrace.analysis.boundaries.layout`), the stream, slots
    and return path (links 5-6) and the concat (link 7). Rows whose ids do not reach a setter
    keep the words their traces always had (``self.setter_words`` is False): the same
    numbers, phrased for an engine that fills the ids itself."""

    def __init__(
        self,
        project: Project,
        row: ModelRow,
        layer_ids: list[int] | None,
        num_layers: int,
        hidden_size: int | None,
        target_config: dict[str, object] | None = None,
    ) -> None:
        self.project, self.row, self.layer_ids, self.L, self.hidden_size = (
            project,
            row,
            layer_ids,
            num_layers,
            hidden_size,
        )
        self.target_config = target_config or {}
        self.steps: list[TraceStep] = []
        self.problems: list[str] = []
        self.indices: tuple[int, ...] | None = None
        self.boundaries: tuple[int, ...] | None = None
        self.dropped: list[tuple[int, str]] = []
        self.extra_slots = 0
        self.outcome = F.Outcome.UNKNOWN
        self.raises_at: F.Location | None = None
        self.reason: str | None = None
        self.setter_words = True
        self.stated: Decision | None = None  # what a setter-less source decided without ids
        self.deltas: tuple[Slot, ...] | None = None  # a delta stream's slots (link 5), once known

    # -- outcome -----------------------------------------------------------------
    def end(self, outcome: F.Outcome, reason: str, at: F.Location | None = None) -> NoReturn:
        self.outcome, self.reason = outcome, reason
        if outcome == F.Outcome.RAISES:
            self.raises_at = at
        self.problems.append(reason)
        raise _Stop

    def end_unproduced(self, reason: str) -> NoReturn:
        """No ids were produced: the outcome the source stated (a refused method raises at
        start-up, an unfilled source captures nothing), else unknown."""
        stated = self.stated
        if stated is not None and stated.outcome == F.Outcome.REFUSES:
            self.end(F.Outcome.RAISES, reason, stated.location)
        if stated is not None and stated.outcome == F.Outcome.CAPTURES_NOTHING:
            self.end(F.Outcome.CAPTURES_NOTHING, reason)
        self.end(F.Outcome.UNKNOWN, reason)

    def result(self) -> TraceResult:
        boundaries = self.boundaries if self.outcome in (F.Outcome.CAPTURES, F.Outcome.CAPTURES_NOTHING) else None
        slots: tuple[Slot, ...] = ()
        if self.outcome == F.Outcome.CAPTURES_DELTAS:
            slots = self.deltas or ()
        elif self.outcome == F.Outcome.CAPTURES:
            slots = tuple(Slot(b) for b in boundaries or ())
        return TraceResult(
            self.row.qualname, self.L, tuple(self.layer_ids) if self.layer_ids is not None else None,
            self.indices, boundaries, tuple(self.dropped), tuple(self.steps), tuple(self.problems), self.hidden_size,
            self.outcome, self.raises_at, self.reason, self.extra_slots, slots=slots,
        )

    def run(self) -> TraceResult:
        """The phases in chain order; each reads its link of ``row.chain``."""
        try:
            chain = self.source_phase(self.row.chain)
            chain = self.id_phase(chain)
            site = self.site_phase(chain)
            self.flow_phase(chain)
            offset = self.point_phase(site)
            self.boundary_phase(chain, site, offset)
            self.stream_phase(chain)
            self.slots_phase(chain)
            self.return_phase(chain)
            self.concat_phase(chain)
        except _Stop:
            pass
        return self.result()

    # -- link 1: the id source ---------------------------------------------------------
    def source_phase(self, chain: CaptureChain | None) -> CaptureChain:
        """No id source: the runner decides (it raises, or nothing is captured). A setter:
        the runner's model check comes first. Any other source states its outcome, which the
        trace keeps for when no ids can be produced."""
        if chain is None or (chain.setter_driven and not chain.transforms):
            self.setterless_phase()
        if not chain.setter_driven:
            self.setter_words = False
            self.stated = chain.production.decision
            return chain
        self.runner_phase()
        self.steps.append(
            TraceStep(
                "config",
                f"config ids: {list(self.layer_ids) if self.layer_ids is not None else 'none given (engine default)'};"
                f" L = {self.L}",
            )
        )
        return chain

    def setterless_phase(self) -> NoReturn:
        """A class without the setter captures nothing only if the runner lets it: an unguarded
        call of the entry setter, or a check that raises, ends the run there (per call site)."""
        verdicts = runner_verdicts(self.project.lookup, self.row.qualname)
        for v in verdicts:
            self.steps.append(TraceStep("runner", v.text, v.call.raises_at if v.raises else v.call.location))
        raising = next((v for v in verdicts if v.raises), None)
        if raising is not None:
            self.end(F.Outcome.RAISES, raising.text, raising.call.raises_at)
        self.end(
            F.Outcome.CAPTURES_NOTHING,
            f"{self.row.name} has no layer-capture setter: it cannot capture auxiliary hidden states",
        )

    def runner_phase(self) -> None:
        """A class with the setter still meets the runner's model check first: the runner tests
        the model (an interface, a predicate) before it calls the setter, so a class that does
        not declare what the check asks for raises there and its setter never runs. A check that
        only skips the call does not end the trace here."""
        raising = [v for v in runner_verdicts(self.project.lookup, self.row.qualname) if v.raises]
        for v in raising:
            self.steps.append(TraceStep("runner", v.text, v.call.raises_at))
        if raising:
            self.end(F.Outcome.RAISES, raising[0].text, raising[0].call.raises_at)

    # -- link 2: id production -----------------------------------------------------------
    def id_phase(self, chain: CaptureChain) -> CaptureChain:
        """The concrete ids the site meets, by the way link 2 produces them."""
        kind = chain.production.kind
        if kind is Production.BUILDER_LAYOUT:
            self.indices = self.layout_ids(chain)
        elif kind is Production.SERVING_IDS:
            self.indices = self.serving_ids(chain)
        else:
            if chain.holder is not None and chain.holder.depends_on:
                chain = self.bind_dynamic(chain)
            self.run_chain(chain, self.initial_ids(chain))
        return chain

    def bind_dynamic(self, chain: CaptureChain) -> CaptureChain:
        """The wrapper's language model is whatever class the target config names under the
        holder link's ``depends_on`` (``text_config.architectures``): look it up in the registry
        and trace that class's chain. Without a target config the answer is conditional."""
        assert chain.holder is not None and chain.holder.depends_on
        key = chain.holder.depends_on
        entry = chain.transforms[0]
        issue = next((p for p in chain.problems if p.kind == F.ProblemKind.DEPENDS_ON_CONFIG), None)
        where = issue.location if issue else entry.location
        path = key.split(".")
        value: object = self.target_config
        for part in path:
            value = value.get(part) if isinstance(value, dict) else None
        arch = value[0] if isinstance(value, list) and value and isinstance(value[0], str) else None
        if arch is None:
            self.steps.append(
                TraceStep("holder", f"{issue.text if issue else key}; give --target-config to resolve it", where)
            )
            self.end(
                F.Outcome.UNKNOWN, f"the capturing class depends on the target config's {key}: pass --target-config"
            )
        inner = self.project.row(arch)
        if inner is None or inner.capture is None or inner.chain is None:
            self.steps.append(
                TraceStep("holder", f"{key} = {arch}: no class of that architecture can capture in this tree", where)
            )
            self.end(F.Outcome.CAPTURES_NOTHING, f"{key} = {arch}, which has no layer-capture setter here", where)
        if entry.transform not in (F.DELEGATES, F.IDENTITY):
            self.end(
                F.Outcome.UNKNOWN,
                f"{entry.method} changes the ids ({entry.transform}) before a config-dependent holder",
            )
        self.steps.append(
            TraceStep(
                "holder",
                f"{key} = {arch} -> {inner.name}: the ids are handed on unchanged"
                f" ({entry.owner.rsplit('.', 1)[-1]}.{entry.method})",
                where,
            )
        )
        return inner.chain

    def initial_ids(self, chain: CaptureChain) -> object:
        """The ids the first setter receives. Without config ids an engine either asks a
        default getter first (vLLM style) or hands None down the chain, whose setters may
        supply the default themselves (possibly after delegation)."""
        if self.layer_ids is not None:
            return list(self.layer_ids)
        if any(t.default is not None for t in chain.transforms):
            return None
        found = default_from_getter(self.project, self.row.qualname, self.L)
        if found is None:
            return None  # run the chain on None: it may still default, or say why not
        getter, ids, why = found
        if ids is None:
            self.end(
                F.Outcome.UNKNOWN,
                f"cannot evaluate the default getter {getter.class_qualname.rsplit('.', 1)[-1]}.{getter.method}: {why}",
            )
        self.steps.append(
            TraceStep(
                "config",
                f"default ids from {getter.class_qualname.rsplit('.', 1)[-1]}.{getter.method}() ="
                f" {getter.expression} -> {list(ids)}",
                getter.location,
            )
        )
        return list(ids)

    def unproduced(self, production: ProductionLink, written: bool = True) -> None:
        """A setter-less source that states it is not filled (or refused), or writes no
        layout: say why, and end."""
        stated = production.decision
        if stated is not None and (stated.outcome != F.Outcome.CAPTURES or not written):
            self.steps.append(TraceStep("source", stated.reason, stated.location))
            self.end_unproduced(f"{str(stated.outcome).replace('_', ' ')}: {stated.reason}")

    def layout_ids(self, chain: CaptureChain) -> tuple[int, ...]:
        """BUILDER_LAYOUT: the engine writes the ids itself (a config builder's expression,
        evaluated on L), so the draft's ids are *ignored*: the trace says so and reports the
        engine's layout whatever ``--layer-ids`` says."""
        source, production = chain.source, chain.production
        given = f"draft ids {list(self.layer_ids)}" if self.layer_ids is not None else "no draft ids"
        holder = _short((chain.holder.holder if chain.holder else None) or "?")
        read = (
            f"{holder} reads {source.key} from the"
            f" {'config' if source.kind == F.SourceKind.CONFIG_ATTRIBUTE else 'build context'}"
        )
        self.steps.append(
            TraceStep(
                "config",
                f"{given}: {F.Transform.IGNORED} - {read}; the engine fills it itself, the draft's ids are never read;"
                f" L = {self.L}",
                source.location,
            )
        )
        write = production.layout
        self.unproduced(production, write is not None)
        if write is None:
            self.end_unproduced("no layout is written")
        owner = _short(write.builder) if write.builder else "the engine"
        try:
            value = evaluate(write.expression, _layer_names(write.expression, write.bindings, self.L))
        except CannotEvaluate as exc:
            self.end_unproduced(f"cannot evaluate {write.key} = {write.expression}: {exc}")
        ids = _as_ids(value)
        if ids is None:
            self.end_unproduced(f"{write.expression} is not a list of ints")
        gate = f" when {write.condition}" if write.condition else ""
        self.steps.append(
            TraceStep("builder", f"{owner}: {write.key} = {write.expression} -> {list(ids)}{gate}", write.location)
        )
        return ids

    def serving_ids(self, chain: CaptureChain) -> tuple[int, ...]:
        """SERVING_IDS: the engine takes the ids from its serving config (``--layer-ids``
        stands for it), sorted, with defaults applied by the metadata class."""
        production, key = chain.production, chain.source.key
        self.unproduced(production)
        if self.layer_ids is not None:
            ids = tuple(sorted(set(self.layer_ids)))
            self.steps.append(
                TraceStep(
                    "config",
                    f"serving config {key} = {list(self.layer_ids)}: the engine stores them sorted -> {list(ids)}; L ="
                    f" {self.L}",
                )
            )
            return ids
        default = production.default
        if default is None:
            self.end_unproduced(f"no ids given and no metadata class applies defaults to {key}")
        attribute = default.attribute
        # The metadata as a target's serving builds it: its layer counts are L, no ids were given,
        # and the flags of a draft's (or another method's) metadata are off.
        conv = self.project.conv
        names: dict[str, object] = {f"self.{count}": self.L for count in sorted(conv.metadata_layer_counts)}
        names[f"self.{attribute}"] = None
        names.update((f"self.{flag}", False) for flag in sorted(conv.target_false_flags))
        run = run_function(default.source, {}, names)
        writes = [w for w in run.writes if w.target == f"self.{attribute}" and _as_ids(w.value) is not None]
        if run.raised or not writes:
            self.end_unproduced(
                f"{_short(default.owner)}.{default.method} gives no default for L = {self.L}:"
                f" {run.raised or '; '.join(run.unevaluated) or 'no write'}"
            )
        ids = tuple(sorted(_as_ids(writes[0].value) or ()))
        self.steps.append(
            TraceStep(
                "default",
                f"no {key} given: {_short(default.owner)}.{default.method} sets {attribute} = {writes[0].expression} ->"
                f" {list(ids)} (sorted); L = {self.L}",
                default.location,
            )
        )
        return ids

    # -- link 2 for setters: the transform chain ------------------------------------------
    def has_attribute_for(self, qualname: str) -> Callable[[str, str], bool]:
        """``hasattr(self, "x")`` / ``hasattr(self.m, "x")`` decided from the class (or the
        class built as ``self.m``): its methods and __init__ attributes; an object whose
        class cannot be resolved is taken to have it (the delegate was resolved already)."""
        project = self.project

        def known(q: str) -> set[str]:
            out: set[str] = set()
            for c in project.lookup.mro(q):
                cls = project.lookup.classes.get(c)
                if cls:
                    out.update(cls.methods)
                    out.update(a.attribute for a in cls.assignments)
            return out

        def check(owner: str, attribute: str) -> bool:
            if owner == "self":
                return attribute in known(qualname)
            if owner.startswith("self.") and owner.count(".") == 1:
                target = project.holders.attribute_class(qualname, owner[5:])
                return attribute in known(target) if target else True
            return True

        return check

    def setter_fact(self, link: TransformLink) -> F.SetterFact:
        """The setter a transform link names (its source is what the evaluator runs)."""
        return self.project.lookup.setters[link.owner][link.method]
    def run_chain(self, chain: CaptureChain, ids: object) -> None:
        """Link 2: each transform link's setter run on the ids it receives."""
        guards, model = self.project.conv.pp_guards, ModelNames.of(self.project.conv)
        links = chain.transforms
        for position, link in enumerate(links):
            setter = self.setter_fact(link)
            param = setter.parameter or "layer_ids"
            run = run_function(
                setter.source,
                {param: ids},
                _bindings(self.L, setter.source, guards, model, self.has_attribute_for(link.acts_on)),
            )
            owner = setter.class_qualname.rsplit(".", 1)[-1]
            self.branch_steps(setter, run)
            if run.raised:
                self.setter_raised(setter, run, ids)
            writes = [
                w
                for w in run.writes
                if w.target.rsplit(".", 1)[-1] in self.project.conv.attributes and _as_ids(w.value) is not None
            ]
            nxt = links[position + 1] if position + 1 < len(links) else None
            calls = [c for c in run.calls if nxt is not None and c.callee.endswith("." + nxt.method)]
            if writes:
                self.indices = _as_ids(writes[-1].value)
                w = writes[-1]
                self.steps.append(
                    TraceStep(
                        "setter",
                        f"{owner}.{setter.method}: {w.target} = {w.expression} -> {list(self.indices or ())} "
                        f" [{setter.id_transform}]",
                        self.line_of(setter, w.line),
                    )
                )
                return
            if calls:
                call = calls[-1]
                ids = call.arguments[0] if call.arguments else None
                source = call.argument_sources[0] if call.argument_sources else ""
                self.steps.append(
                    TraceStep(
                        "setter",
                        f"{owner}.{setter.method}: hands {source} = {ids} to {call.callee}()  [{setter.id_transform}]",
                        self.line_of(setter, call.line),
                    )
                )
                continue
            self.no_indices(chain, setter, run, ids)
        if self.indices is None:
            self.end(F.Outcome.UNKNOWN, "the setter chain ended without writing capture indices")

    def setter_raised(self, setter: F.SetterFact, run: FunctionRun, ids: object) -> None:
        owner = setter.class_qualname.rsplit(".", 1)[-1]
        at = self.line_of(setter, run.raised_line) if run.raised_line else setter.location
        self.steps.append(TraceStep("setter", f"{owner}.{setter.method}({ids}) raises {run.raised}", at))
        self.end(F.Outcome.RAISES, f"{owner}.{setter.method} raises {run.raised} for these ids", at)

    def no_indices(self, chain: CaptureChain, setter: F.SetterFact, run: FunctionRun, ids: object) -> None:
        """A setter that neither wrote indices nor handed them on: say why, and end."""
        owner = setter.class_qualname.rsplit(".", 1)[-1]
        self.missing_delegate(chain, setter, run)
        self.steps.append(TraceStep("setter", f"{owner}.{setter.method}: no capture indices set", setter.location))
        if run.returned_early and not run.writes:
            self.end(
                F.Outcome.CAPTURES_NOTHING, f"{owner}.{setter.method} returns before setting anything", setter.location
            )
        if ids is None and not any(t.default for t in chain.transforms):
            self.end(
                F.Outcome.CAPTURES_NOTHING,
                "no ids given and neither the setter chain nor a default getter gives defaults; the engine would fail"
                " or capture nothing",
                setter.location,
            )
        self.end(
            F.Outcome.UNKNOWN,
            f"cannot evaluate {owner}.{setter.method}: {'; '.join(run.unevaluated) or 'no capture attribute written'}",
        )

    def missing_delegate(self, chain: CaptureChain, setter: F.SetterFact, run: FunctionRun) -> None:
        """The setter ran its call of ``<delegate>.<method>()`` on an object whose class (resolved)
        defines no such method: Python raises AttributeError at that call, whatever the ids."""
        lacking = next(
            (p for p in chain.problems if p.kind == F.ProblemKind.DELEGATE_LACKS_SETTER and p.location is not None),
            None,
        )
        target = self.row.capture.delegates_to if self.row.capture is not None else None
        if lacking is not None and setter.delegate and setter.delegate_method and not target:
            self.local_holder_fails(setter, lacking.text)
        if lacking is None or not setter.delegate or not setter.delegate_method or not target:
            return
        lookup = self.project.lookup
        defined = {m for q in lookup.mro(target) for m in getattr(lookup.classes.get(q), "methods", ())}
        if setter.delegate_method in defined or "__getattr__" in defined:
            return  # defined under another name's rules, or looked up dynamically: no claim
        callee = f"{setter.delegate}.{setter.delegate_method}"
        call = next((c for c in run.calls if c.callee == callee), None)
        if call is None:
            return  # this path does not reach the delegation (a hasattr test turned it away)
        at = self.line_of(setter, call.line)
        owner = setter.class_qualname.rsplit(".", 1)[-1]
        reason = f"{owner}.{setter.method} calls {callee}() but {lacking.text}: AttributeError"
        self.steps.append(TraceStep("setter", reason, at))
        self.end(F.Outcome.RAISES, reason, at)

    def local_holder_fails(self, setter: F.SetterFact, why: str) -> None:
        """A setter handing the ids to a local holder (``holder = getattr(owner, "model", owner)``)
        none of whose candidates defines the method (resolve decided it from the instance's own
        construction): it fails whichever it picks — at an ``assert`` on the holder when the
        setter checks it first, else at the call (AttributeError)."""
        lines = setter.source.splitlines()
        method = f".{setter.delegate_method}("
        call = next((n for n, text in enumerate(lines, 1) if method in text), None)
        check = next(
            (n for n, text in enumerate(lines, 1) if text.strip().startswith("assert ") and (call is None or n < call)),
            None,
        )
        line = check or call
        if line is None:
            return
        at = self.line_of(setter, line)
        owner = setter.class_qualname.rsplit(".", 1)[-1]
        error = "AssertionError" if check else "AttributeError"
        reason = f"{owner}.{setter.method}: {why}: {error}"
        self.steps.append(TraceStep("setter", reason, at))
        self.end(F.Outcome.RAISES, reason, at)

    @staticmethod
    def line_of(setter: F.SetterFact, line: int) -> F.Location:
        """A line of the setter's source (1 = its ``def``) as a file location."""
        return F.Location(setter.location.file, setter.location.line + max(line, 1) - 1)

    def branch_steps(self, setter: F.SetterFact, run: FunctionRun) -> None:
        """Every decision the setter took, inner predicates included, each with its line."""
        owner = setter.class_qualname.rsplit(".", 1)[-1]
        for step in run.steps:
            verdict = "taken" if step.taken else "not taken"
            self.steps.append(
                TraceStep(
                    "branch",
                    f"{owner}.{setter.method}: `{step.condition}` -> {verdict}: {step.reason}",
                    self.line_of(setter, step.line),
                )
            )

    # -- links 3-4: the store and the site --------------------------------------------------
    def site_phase(self, chain: CaptureChain) -> SiteLink:
        """What is written where the site reads it, then the site; a chain without a site
        ends here (a setter chain: nothing reads the indices; an engine-filled one: the point
        is unknown)."""
        site, holder = chain.site, chain.holder
        holder_name = _short((holder.holder if holder else None) or "?")
        if not self.setter_words:
            if chain.production.kind is Production.BUILDER_LAYOUT and holder is not None:
                self.steps.append(
                    TraceStep(
                        "attribute",
                        f"{holder_name}.{holder.attribute} = {list(self.indices or ())}",
                        chain.source.location,
                    )
                )
            if site is None:
                self.end(F.Outcome.UNKNOWN, "capture point unknown: no capture loop reads the ids")
            return site
        if site is None:
            self.return_phase(chain)  # a wrapper that unpacks what no capture returns raises anyway
            breaking = [p.text for p in chain.problems if p.kind not in NOT_BREAKING]
            self.end(
                F.Outcome.CAPTURES_NOTHING, f"no capture loop reads the indices ({'; '.join(breaking) or 'none found'})"
            )
        indices = self.indices or ()
        attribute = site.attribute or (holder.attribute if holder else None) or "capture attribute"
        shown = (
            sorted(set(indices))
            if len(set(indices)) != len(indices) or list(indices) != sorted(indices)
            else list(indices)
        )
        self.steps.append(TraceStep("attribute", f"{holder_name}.{attribute} = {shown}", site.location))
        loop_range = " ".join((site.loop_range or "").split())
        self.steps.append(
            TraceStep(
                "loop",
                f"{site.function}: for {site.loop_variable} in {loop_range} (single pipeline rank: 0..{self.L - 1});"
                f" {site.mechanism}",
                site.location,
            )
        )
        return site

    def flow_phase(self, chain: CaptureChain) -> None:
        """The loop reads what no setter of the chain writes (analysis/attribute_flow): it never
        records, whatever the ids; the engine then raises where the wrapper unpacks, or captures
        nothing."""
        own = self.row.chain  # the row's own link 8 (not a config-bound holder's chain)
        mismatch = own.serving.unread if own is not None and chain.has(F.ProblemKind.SETTER_WRITES_UNREAD) else None
        if mismatch is None:
            return
        self.steps.append(TraceStep("attribute", mismatch.words(), mismatch.site_at))
        outcome, reason, at = nothing_recorded(
            self.project.lookup, self.row.qualname, chain.holder.holder if chain.holder else None
        )
        self.boundaries = ()
        self.end(outcome, reason, at)

    def point_phase(self, site: SiteLink) -> int:
        if site.point == F.UNKNOWN:
            if self.setter_words:
                self.steps.append(TraceStep("point", f"capture point unknown: {site.note}", site.location))
            self.end(F.Outcome.UNKNOWN, f"capture point unknown: {site.note}")
        shift = offset(site.point)
        mechanism = f" ({site.mechanism})" if not self.setter_words else ""
        self.steps.append(
            TraceStep(
                "point",
                f"capture point {site.point}{mechanism}: index i yields boundary"
                f" i{' + 1' if shift else ''} ({site.note})",
                (site.evidence or (site.location,))[0],
            )
        )
        return shift

    # -- boundaries (flowtrace.analysis.boundaries) ------------------------------------------
    def boundary_phase(self, chain: CaptureChain, site: SiteLink, shift: int) -> None:
        """Indices -> boundaries at the site's point and capturability, read back in the
        concat's order; ids dropped with the reason; a recording that raises at the loop's
        first iteration, or a read-back by key of an id never stored, ends the trace."""
        L, stream, concat = self.L, chain.stream, chain.concat
        first = site.first_iteration
        raising = stream.raising_index if stream is not None else (first.index if first is not None else None)
        self.wrap_flagged(chain, site)
        found = layout(
            self.indices or (), site.point, L,
            # a raising index-0 record is reached (and raises, see the stream phase)
            embedding=bool(site.embedding_capturable) or (raising is not None and raising + shift == 0),
            last_layer=bool(site.last_layer_capturable),
            order=concat.order if concat is not None else F.ConcatOrder.LOOP,
            unmatched=concat.unmatched if concat is not None else Unmatched.DROPPED,
            post_norm=concat.post_norm_ids if concat is not None else (),
            raising_index=raising,
        )
        if found.raises is not None and stream is None:
            self.raise_in_loop(chain, site, found.raises)
        post_at = concat.post_norm_at if concat is not None else None
        unwritten = [d.index for d in found.dropped if d.reason is DropReason.UNWRITTEN]
        if unwritten:
            self.problems.append(
                f"ids {unwritten} match no layer but each takes a buffer slot the fc reads: uninitialised memory, no"
                " error"
            )
        for d in found.dropped:
            why = _drop_text(d, L, self.setter_words)
            self.dropped.append((d.index, why))
            self.steps.append(
                TraceStep(
                    "dropped",
                    f"dropped id {d.index}: {why}",
                    (post_at if d.reason is DropReason.POST_NORM else None) or site.location,
                    d.index,
                )
            )
        self.boundaries, self.extra_slots = found.boundaries, found.extra_slots
        if concat is not None and concat.last_layer_at is not None and L in found.boundaries:
            self.steps.append(TraceStep("boundaries", f"b={L} is recorded after the loop", concat.last_layer_at))

    def raise_in_loop(self, chain: CaptureChain, site: SiteLink, raised: Raise) -> NoReturn:
        """A site without a stream link raises inside the loop: at the first iteration (an
        operand still None) or when the states are read back by a key never stored."""
        i, first = raised.index, site.first_iteration
        if raised.kind is RaiseKind.FIRST_ITERATION and first is not None:
            self.steps.append(
                TraceStep(
                    "point",
                    f"index {i}: {site.captured_expression or 'the stored value'} with {first.operand} = None raises"
                    " TypeError",
                    first.at,
                )
            )
            self.end(
                F.Outcome.RAISES,
                f"raises: index {i} is met at the loop's first iteration, where {first.operand} is still None and is"
                " added unguarded (TypeError)",
                first.at,
            )
        at = (chain.concat.location if chain.concat is not None else None) or site.location
        holder = _short((chain.holder.holder if chain.holder else None) or "?")
        self.steps.append(TraceStep("concat", f"by_layer[{i}] does not exist: KeyError", at))
        self.end(
            F.Outcome.RAISES,
            f"raises: id {i} is never stored (no layer {i}), so {holder}'s cat([by_layer[i] for i in ids]) raises"
            " KeyError",
            at,
        )

    def wrap_flagged(self, chain: CaptureChain, site: SiteLink) -> None:
        """A site that reads a per-layer flag (``getattr(layer, "<flag>", False)``) instead of
        the capture attribute: the setter marked ``self.layers[i]``, and Python indexes a list
        from the end for ``-L <= i < 0``, so such an id marks layer ``L + i`` (ids >= L raised
        in the setter already)."""
        if chain.holder is None or chain.holder.store is not StoreKind.LAYER_MARKS or not self.indices:
            return
        L = self.L
        wrapped = tuple(i + L if -L <= i < 0 else i for i in self.indices)
        if wrapped != self.indices:
            moved = ", ".join(f"{i} -> {i + L}" for i in self.indices if -L <= i < 0)
            self.steps.append(
                TraceStep(
                    "attribute",
                    f"the loop reads the layer flag {site.attribute!r}: negative ids mark the layer counted from the"
                    f" end ({moved})",
                    site.location,
                )
            )
            self.indices = wrapped

    # -- link 5: stream semantics ---------------------------------------------------------
    def stream_phase(self, chain: CaptureChain) -> None:
        stream = chain.stream
        if stream is None:
            return
        if stream.raising_index is not None and stream.raising_index in (self.indices or ()):
            self.steps.append(TraceStep("stream", stream.reason or "recording raises", stream.raises_at))
            self.end(
                F.Outcome.RAISES, stream.reason or f"recording index {stream.raising_index} raises", stream.raises_at
            )
        if stream.kind == F.StreamKind.MUTATED_REFERENCE and self.boundaries:
            self.reference_phase(stream)
        if stream.kind == F.StreamKind.DELTA and any(b > 0 for b in self.boundaries or ()):
            self.delta_phase(chain, stream)

    def delta_phase(self, chain: CaptureChain, stream: StreamLink) -> None:
        """A delta stream: the site records ``hidden_states`` alone while the loop's layers
        return the residual apart, so past the embedding a slot holds what layer b - 1 returned
        first (its output without the residual), not the residual stream at b. The trace goes
        on (a raise or a dropped return still decides first); the concat says what is handed over."""
        self.deltas = delta_slots(self.boundaries or ())
        at = chain.site.location if chain.site is not None else None
        named = ", ".join(_slot_words(s, self.L) for s in self.deltas)
        self.steps.append(
            TraceStep(
                "stream",
                f"`{stream.expression}` is recorded alone while the layers return (hidden_states, residual) apart and"
                " none adds the residual: a slot at b > 0 holds what layer b - 1 returns first, not the residual"
                f" stream: {named}",
                at,
            )
        )

    def reference_phase(self, stream: StreamLink) -> None:
        """A recorded reference the loop updates in place later: what a slot holds is the
        tensor's state when the concat reads it, not the boundary it was recorded at. When the
        loop never rebinds the name, every slot is that one tensor after the last layer (b=L)."""
        what = (
            f"`{stream.expression}` is recorded by reference and updated in place later (`{stream.mutation}`,"
            f" {stream.mutated_at})"
        )
        if not stream.final_state:
            reason = f"{what}, and the loop also rebinds it: a slot holds a state between two layers, not a boundary"
            self.steps.append(TraceStep("stream", reason, stream.mutated_at))
            self.end(F.Outcome.UNKNOWN, reason)
        self.reason = f"{what}: every slot is that one tensor, read after the last layer (b={self.L})"
        self.steps.append(TraceStep("stream", self.reason, stream.mutated_at))
        self.boundaries = (self.L,) * len(self.boundaries or ())

    # -- link 6: fixed-slot collectors ------------------------------------------------------
    def slots_phase(self, chain: CaptureChain) -> None:
        slots = chain.slots
        captured = len(self.boundaries or ())
        wanted = len(self.indices or ())
        if (
            slots is None
            or slots.check is None
            or captured == wanted
            or (captured == 0 and slots.empty_return_at is not None)
        ):
            return  # all slots filled, or an empty collector is returned before the check
        collector = slots.collector.rsplit(".", 1)[-1]
        reason = (
            f"{collector} is sized by {slots.sized_by} = {wanted} but the loop records {captured} state(s); "
            f"its check `{slots.check}` ({slots.check_at}) raises when the forward finalizes it"
        )
        self.steps.append(TraceStep("slots", reason, slots.finalize_at or slots.check_at))
        self.end(F.Outcome.RAISES, reason, slots.finalize_at or slots.check_at)

    # -- link 6: the return path ------------------------------------------------------------
    def return_phase(self, chain: CaptureChain) -> None:
        """Whether the recorded states reach the runner: a decided drop ends in
        captures_nothing, an unpacking of one value raises; an undecided early return is noted."""
        link = chain.returns
        if link is None or link.kind == F.ReturnKind.RETURNED:
            return
        reason = link.reason or str(link.kind)
        if not link.decided:
            self.steps.append(TraceStep("returns", f"on some batches: {reason}", link.location))
            return
        self.steps.append(TraceStep("returns", reason, link.location))
        if link.raises:
            self.end(F.Outcome.RAISES, reason, link.location)
        self.boundaries = ()
        self.end(F.Outcome.CAPTURES_NOTHING, reason, link.location)

    # -- link 7: concat ---------------------------------------------------------------------
    def concat_phase(self, chain: CaptureChain) -> None:
        """The boundaries in read-back order and the fc width they make (every slot counts,
        written or not); nothing recorded means nothing is captured."""
        L, ordered, concat = self.L, self.boundaries or (), chain.concat
        order = concat.order if concat is not None else F.ConcatOrder.LOOP
        slots = len(ordered) + self.extra_slots
        h = self.hidden_size
        width = f"{slots} x {h} = {slots * h}" if h else f"{slots} x hidden_size"
        listed = ", ".join(describe_boundary(b, L) for b in ordered)
        if self.deltas is not None and ordered:
            self.concat_deltas(concat, order, width)
            return
        if not self.setter_words:  # an engine-filled source: the buffer's slots, written or not
            self.steps.append(
                TraceStep(
                    "boundaries", f"captured, {_ORDER_WORDS[order]}: {listed}" if ordered else "nothing is captured"
                )
            )
            post = sum(1 for i in self.indices or () if concat is not None and i in concat.post_norm_ids)
            unwritten = self.extra_slots - post
            extra = (f" + {post} post-final-norm slot" if post else "") + (
                f" + {unwritten} unwritten slot(s) (uninitialised)" if unwritten else ""
            )
            self.steps.append(
                TraceStep(
                    "concat",
                    f"{len(ordered)} states{extra}; fc in_features = {width}",
                    concat.location if concat is not None else None,
                )
            )
            self.outcome = F.Outcome.CAPTURES if ordered else F.Outcome.CAPTURES_NOTHING
            self.reason = ("; ".join(self.problems) or None) if not ordered else None
            return
        if not ordered:
            self.steps.append(TraceStep("boundaries", "nothing is captured"))
            self.outcome, self.reason = (
                F.Outcome.CAPTURES_NOTHING,
                "none of the capture indices is recorded by the loop",
            )
            self.problems.append(self.reason)
            return
        self.steps.append(
            TraceStep(
                "boundaries", f"captured, in {'config' if order == F.ConcatOrder.CONFIG else 'loop'} order: {listed}"
            )
        )
        self.steps.append(
            TraceStep(
                "concat",
                f"cat([...], -1) of {len(ordered)} states; fc in_features = {width}",
                concat.location if concat is not None else None,
            )
        )
        self.outcome = F.Outcome.CAPTURES


    def concat_deltas(self, concat: ConcatLink | None, order: F.ConcatOrder, width: str) -> None:
        """The concat of a delta stream's slots: the engine hands the draft layer outputs
        without the residual; no boundary list describes them (outcome ``captures_deltas``)."""
        deltas = self.deltas or ()
        named = ", ".join(_slot_words(s, self.L) for s in deltas)
        self.steps.append(TraceStep("boundaries", f"captured, {_ORDER_WORDS[order]}: {named}"))
        self.steps.append(
            TraceStep(
                "concat",
                f"cat([...], -1) of {len(deltas)} states; fc in_features = {width}",
                concat.location if concat is not None else None,
            )
        )
        outputs = [s.layer_value_of for s in deltas if s.layer_value_of is not None]
        self.outcome = F.Outcome.CAPTURES_DELTAS
        layers = f"layer{'s' if len(outputs) > 1 else ''} {', '.join(map(str, outputs))}"
        which = "no slot is" if len(outputs) == len(deltas) else "not every slot is"
        self.reason = (
            f"the draft is handed the output of {layers} without the residual the layers return apart: {which} a"
            f" residual-stream boundary ({named})"
        )
        self.problems.append(self.reason)


def _slot_words(slot: Slot, num_layers: int) -> str:
    """A recorded state in words: a boundary, or a layer's output without the residual."""
    if slot.boundary is not None:
        return describe_boundary(slot.boundary, num_layers)
    return f"layer {slot.layer_value_of}'s output without the residual"


_ORDER_WORDS = {
    F.ConcatOrder.CONFIG: "in config order (duplicates repeat)",
    F.ConcatOrder.SORTED: "in ascending id order (buffer slots)",
    F.ConcatOrder.LOOP: "in loop order",
}


def _drop_text(drop: Drop, num_layers: int, setter_words: bool) -> str:
    """Why an id yields no boundary, in the words of the row's trace (an engine-filled source
    says "not captured here" / "outside range" for what a setter chain's loop words apart)."""
    i, L, reason = drop.index, num_layers, drop.reason
    if reason is DropReason.POST_NORM:
        return (f"id {i} is the post-final-norm state the CausalLM wrapper records; it fills a buffer slot "
                "(first in ascending id order, unless the metadata moves it) but is not a residual-stream boundary")
    if reason is DropReason.UNWRITTEN:
        return (f"id {i} matches no layer (0..{L - 1}); it still takes a slot of the preallocated buffer, "
                "which no layer writes: the draft reads uninitialised memory there and nothing raises")
    if not setter_words:
        return (
            "the embedding (b=0) is not captured here" if drop.boundary == 0 else f"index {i} is outside range(0, {L})"
        )
    if reason is DropReason.NEGATIVE:
        return f"index {i} never equals a loop index (ids are not wrapped like Python negatives)"
    if reason is DropReason.EMBEDDING:
        return "the embedding (b=0) is never captured by this loop"
    if reason is DropReason.LAST_LAYER:
        return f"b={L} (last layer's output) is never captured: the loop records layer inputs only"
    return f"index {i} is outside range(0, {L})"


def _short(qualname: str) -> str:
    return qualname.rsplit(".", 1)[-1]


_COUNT = re.compile(r"num_(hidden_)?layers")


def _layer_names(expression: str, bindings: tuple[tuple[str, str], ...], num_layers: int) -> dict[str, object]:
    """Every dotted name in ``expression`` (or bound before it) that counts layers means L."""
    names: dict[str, object] = {}
    for name, value in bindings:
        if _COUNT.search(value):
            names[name] = num_layers
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError:
        return names
    for node in ast.walk(tree):
        if isinstance(node, (ast.Attribute, ast.Name)) and _COUNT.search(ast.unparse(node)):
            names.setdefault(ast.unparse(node), num_layers)
    return names



def trace_row(
    project: Project,
    row: ModelRow,
    layer_ids: list[int] | None,
    num_layers: int,
    hidden_size: int | None = None,
    target_config: dict[str, object] | None = None,
) -> TraceResult:
    """Evaluate ``row``'s capture chain on concrete ids and L: boundaries and an outcome, then
    what each phase of serving records (link 8, :mod:`flowtrace.analysis.serving_phase`). The
    one tracer entry: ``flowtrace trace``, compat, suggest, fix, the checks and the report call
    it. ``target_config`` (the target's config.json) resolves holders built from it.

    Traced once per project, row and arguments: the rules and the report ask for the same
    rows at the same L (the result is frozen and depends on nothing else)."""
    return _memo(project, row, (True, layer_ids, num_layers, hidden_size), target_config, _all_phases)


# How a row is traced (links 1-7, or all phases): what _memo runs once per arguments.
_Run = Callable[[Project, ModelRow, list[int] | None, int, int | None, dict[str, object] | None], TraceResult]


def _links(project: Project, row: ModelRow, layer_ids: list[int] | None, num_layers: int, hidden_size: int | None,
           target_config: dict[str, object] | None) -> TraceResult:
    """Links 1-7 (the tracer's phases up to the concat)."""
    return _Tracer(project, row, layer_ids, num_layers, hidden_size, target_config).run()


def _all_phases(project: Project, row: ModelRow, layer_ids: list[int] | None, num_layers: int, hidden_size: int | None,
                target_config: dict[str, object] | None) -> TraceResult:
    """Links 1-7, then the serving phase, which traces links 1-7 again on the ids each phase of
    serving holds."""
    result = _memo(project, row, (False, layer_ids, num_layers, hidden_size), target_config, _links)
    link = row.chain.serving if row.chain is not None else NO_SERVING
    served = serving_phase(
        link,
        result,
        layer_ids,
        lambda ids: _memo(project, row, (False, ids, num_layers, hidden_size), target_config, _links),
    )
    if served is None:
        return result
    steps = result.steps + tuple(TraceStep("serving", text, at) for text, at in served.steps)
    return dataclasses.replace(result, steps=steps, phases=served.phases, batch_paths=served.batch_paths)


def _memo(
    project: Project,
    row: ModelRow,
    args: tuple[bool, list[int] | None, int, int | None],
    target_config: dict[str, object] | None,
    run: _Run,
) -> TraceResult:
    """``run`` once per project, row and arguments (not memoised with a target config)."""
    serving, layer_ids, num_layers, hidden_size = args
    if target_config is not None:
        return run(project, row, layer_ids, num_layers, hidden_size, target_config)
    memo = _TRACES.get(project, _no_traces)
    key = (serving, id(row), tuple(layer_ids) if layer_ids is not None else None, num_layers, hidden_size)
    found = memo.get(key)
    if found is None or found[0] is not row:
        found = (row, run(project, row, layer_ids, num_layers, hidden_size, None))
        memo[key] = found
    return found[1]


# The last project's traces: {(serving, id(row), ids, L, hidden): (row, result)} (the row is kept
# so that its id stays its own).
_TraceMemo = dict[tuple[object, ...], tuple[ModelRow, TraceResult]]
_TRACES: LastMemo[Project, _TraceMemo] = LastMemo()


def _no_traces(project: Project) -> _TraceMemo:
    return {}


def parse_ids(text: str) -> list[int] | None:
    """``-1,2,30`` -> [-1, 2, 30]; ``default`` -> None."""
    text = text.strip()
    if text.lower() in {"default", ""}:
        return None
    try:
        return [int(x) for x in text.replace(" ", "").strip("[]").split(",") if x]
    except ValueError:
        raise ValueError(f"--layer-ids must be comma-separated integers or 'default', got {text!r}") from None


def trace_json(result: TraceResult) -> dict[str, Any]:
    out: dict[str, Any] = {
        "schema": "flowtrace.trace/1",
        "model": result.model,
        "num_layers": result.num_layers,
        "layer_ids": list(result.layer_ids) if result.layer_ids is not None else None,
        "capture_indices": list(result.capture_indices) if result.capture_indices is not None else None,
        "boundaries": list(result.boundaries) if result.boundaries is not None else None,
        "dropped": [{"id": i, "reason": r} for i, r in result.dropped],
        "hidden_size": result.hidden_size,
        "fc_in_features": result.fc_in_features,
        "extra_slots": result.extra_slots,
        "steps": [
            {
                "kind": s.kind,
                "text": s.text,
                "file": s.location.file if s.location else None,
                "line": s.location.line if s.location else None,
            }
            for s in result.steps
        ],
        "problems": list(result.problems),
        "outcome": str(result.outcome),
        "raises_at": str(result.raises_at) if result.raises_at else None,
        "reason": result.reason,
        "serving": {
            "phases": [
                {
                    "phase": p.phase,
                    "words": p.words,
                    "ids": list(p.ids) if p.ids is not None else None,
                    "outcome": str(p.outcome),
                    "boundaries": list(p.boundaries) if p.boundaries is not None else None,
                    "reason": p.reason,
                    "at": str(p.at) if p.at else None,
                    "calls": list(p.calls),
                }
                for p in result.phases
            ],
            "batch_paths": [
                {
                    "batches": b.batches,
                    "at": str(b.at),
                    "outcome": "raises",
                    "how": b.how,
                    "raises_at": str(b.raises_at) if b.raises_at else None,
                }
                for b in result.batch_paths
            ],
        },
    }
    if result.outcome == F.Outcome.CAPTURES_DELTAS:  # what each state is, where no boundary list says it
        out["slots"] = [{"boundary": s.boundary, "layer_value_of": s.layer_value_of} for s in result.slots]
    return out


def trace_text(result: TraceResult) -> str:
    lines = [f"trace {result.model} (L = {result.num_layers})"]
    for n, s in enumerate(result.steps, 1):
        where = f"  [{s.location}]" if s.location else ""
        lines.append(f"{n:>2}. {s.kind:<10} {s.text}{where}")
    prefill = " (prefill)" if result.phases else ""
    if result.boundaries is not None and result.outcome == F.Outcome.CAPTURES:
        lines.append(f"=> boundaries {list(result.boundaries)}{prefill}")
    else:
        where = f" at {result.raises_at}" if result.raises_at else ""
        lines.append(f"=> {result.outcome}{where}: {result.reason}{prefill}")
    for p in result.phases:
        if p.outcome != result.outcome or p.boundaries != result.boundaries:
            what = (
                f"boundaries {list(p.boundaries or ())}"
                if p.outcome == F.Outcome.CAPTURES
                else f"{p.outcome}" + (f": {p.reason}" if p.reason else "")
            )
            lines.append(f"=> {p.words}: {what}" + (f"  [{p.at}]" if p.at else ""))
    for b in result.batch_paths:
        lines.append(f"=> raises on {b.batches}: {b.how}  [{b.at}]")
    for problem in result.problems:
        if problem != result.reason:
            lines.append(f"problem: {problem}")
    return "\n".join(lines) + "\n"


__all__ = [
    "TraceResult",
    "TraceStep",
    "trace_row",
    "parse_ids",
    "trace_json",
    "trace_text",
    "CannotEvaluate",
    "describe_boundary",
]

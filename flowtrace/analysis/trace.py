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
import textwrap
from functools import lru_cache
from dataclasses import dataclass

from flowtrace.model import facts as F
from flowtrace.analysis.layer_ids import CannotEvaluate, LayerStack, evaluate, normalise, run_function
from flowtrace.analysis.resolve import ModelRow, Project


@dataclass(frozen=True, slots=True)
class TraceStep:
    kind: str  # config | setter | attribute | loop | point | boundaries | concat | fc
    text: str
    location: F.Location | None = None


@dataclass(frozen=True, slots=True)
class TraceResult:
    model: str
    num_layers: int
    layer_ids: tuple[int, ...] | None  # None: the engine's default
    capture_indices: tuple[int, ...] | None
    boundaries: tuple[int, ...] | None  # capture (loop) order; None when undecidable
    dropped: tuple[tuple[int, str], ...]
    steps: tuple[TraceStep, ...]
    problems: tuple[str, ...]
    hidden_size: int | None = None

    @property
    def ok(self) -> bool:
        return self.boundaries is not None

    @property
    def fc_in_features(self) -> int | None:
        if self.boundaries is None or self.hidden_size is None:
            return None
        return len(self.boundaries) * self.hidden_size


def describe_boundary(b: int, num_layers: int) -> str:
    if b == 0:
        return "b=0 (embedding)"
    if b == num_layers:
        return f"b={b} (last layer's output, before the final norm)"
    return f"b={b} (output of layer {b - 1})"


_OWNERS = ("self", "self.model", "holder", "owner", "parent_ref", "self.language_model", "self.language_model.model", "self.model.model")
_CONFIGS = ("self.config", "config", "self.config.text_config", "self.text_config", "self.model.config", "self.language_model.config")


@lru_cache(maxsize=None)
def _fixed_keys() -> tuple[tuple[str, str], ...]:
    """(normalised expression, kind) for the layer-count spellings engines use."""
    keys = []
    for owner in _OWNERS:
        keys += [(f"{owner}.layers", "stack"), (f"len({owner}.layers)", "count")]
    for config in _CONFIGS:
        keys += [(f"{config}.num_hidden_layers", "count"), (f"{config}.num_layers", "count")]
    keys += [("self.num_layers", "count"), ("self.end_layer", "count"), ("self.start_layer", "zero")]
    return tuple((normalise(k), kind) for k, kind in keys)


@lru_cache(maxsize=4096)
def _source_sites(source: str, pp_guards: tuple[str, ...]) -> tuple[tuple[str, str, object], ...]:
    """The expressions of one setter that need a binding, parsed once per source:
    (ast.unparse text, kind, payload)."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except (SyntaxError, ValueError, RecursionError):
        return ()
    sites = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("hasattr", "getattr"):
            payload = None
            if node.func.id == "hasattr" and len(node.args) >= 2 and isinstance(node.args[0], ast.Name) and node.args[0].id == "self" and isinstance(node.args[1], ast.Constant):
                payload = node.args[1].value
            sites.append((ast.unparse(node), node.func.id, payload))
        elif isinstance(node, ast.Attribute) and node.attr in pp_guards:
            sites.append((ast.unparse(node), "guard", None))
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Is):
            text = ast.unparse(node)
            if "language_model" in text:
                sites.append((text, "is-none", None))
    return tuple(sites)


def _bindings(num_layers: int, source: str, pp_guards: tuple[str, ...], has_attribute=None) -> dict[str, object]:
    """What the setter's free expressions mean for a target with ``num_layers`` layers.

    Layer counts come from the config or the layer list, under the few owners engines use;
    pipeline guards take the last-rank path (the rank that owns the draft); ``hasattr(self, x)``
    is decided from the class, other ``hasattr``/``is None`` checks on delegates take the
    delegating path, since the chain was resolved before tracing.
    """
    values = {"stack": LayerStack(num_layers), "count": num_layers, "zero": 0}
    names: dict[str, object] = {key: values[kind] for key, kind in _fixed_keys()}
    for text, kind, payload in _source_sites(source, tuple(pp_guards)):
        if kind == "hasattr":
            names[text] = has_attribute(payload) if (has_attribute and payload is not None) else True
        elif kind == "getattr":
            # `holder = getattr(parent, "model", parent)`: whichever object it picks holds the layers.
            names[text] = LayerStack(num_layers)
        elif kind == "guard":
            names[text] = True
        elif kind == "is-none":
            names[text] = False  # `self.language_model is None`
    return names


def default_from_getter(project: Project, qualname: str, num_layers: int, depth: int = 0):
    """(getter, ids or None, reason) from the class's default-layer getter, following a
    getter that returns another object's getter; None when the class has no getter.

    Only the returned expression is evaluated, with each local that counts layers
    (``num_layers = len(holder.layers)``) bound to L: the surrounding holder lookup is
    dynamic and not needed for the value."""
    getter = next((project.getters[q] for q in project.mro(qualname) if q in project.getters), None)
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
            target = project.attribute_class(qualname, owner[5:])
            if target:
                inner = default_from_getter(project, target, num_layers, depth + 1)
                if inner is not None:
                    return inner
        return getter, None, f"returns {expression}, whose class could not be resolved"
    names: dict[str, object] = _bindings(num_layers, "", ())
    try:
        tree = ast.parse(textwrap.dedent(getter.source))
    except SyntaxError:
        tree = None
    for node in ast.walk(tree) if tree else ():
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            text = ast.unparse(node.value)
            if "layers" in text or "num_hidden_layers" in text:
                names[node.targets[0].id] = num_layers
    try:
        value = evaluate(expression, names)
    except CannotEvaluate as exc:
        return getter, None, str(exc)
    ids = _as_ids(value)
    return getter, ids, None if ids is not None else f"{expression} is not a list of ints"


def _as_ids(value: object) -> tuple[int, ...] | None:
    if isinstance(value, (list, tuple, set, frozenset)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return tuple(value) if not isinstance(value, (set, frozenset)) else tuple(sorted(value))
    return None


def trace_row(project: Project, row: ModelRow, layer_ids: list[int] | None, num_layers: int, hidden_size: int | None = None) -> TraceResult:
    steps: list[TraceStep] = []
    problems: list[str] = []
    capture = row.capture

    def done(indices=None, boundaries=None, dropped=()) -> TraceResult:
        return TraceResult(
            row.qualname, num_layers, tuple(layer_ids) if layer_ids is not None else None,
            indices, boundaries, tuple(dropped), tuple(steps), tuple(problems), hidden_size,
        )

    if capture is None:
        problems.append(f"{row.name} has no layer-capture setter: it cannot capture auxiliary hidden states")
        return done()
    guards = project.conv.pp_guards

    def has_attribute_for(qualname: str):
        """``hasattr(self, "x")`` is decided from the class's methods and __init__ attributes;
        a check on another object is taken as true (the delegate was resolved already)."""
        known = set()
        for q in project.mro(qualname):
            cls = project.classes.get(q)
            if cls:
                known.update(cls.methods)
                known.update(a.attribute for a in cls.assignments)

        def check(attribute: str) -> bool:
            return attribute in known

        return check
    steps.append(TraceStep("config", f"config ids: {list(layer_ids) if layer_ids is not None else 'none given (engine default)'}; L = {num_layers}"))

    ids: object = list(layer_ids) if layer_ids is not None else None
    if ids is None and capture.chain[0].default_layers is None:
        # The engine asks a default getter when the config has no ids (vLLM style).
        found = default_from_getter(project, row.qualname, num_layers)
        if found is None:
            problems.append("no ids given and neither the setter nor a default getter gives defaults; the engine would fail or capture nothing")
            return done()
        getter, ids, why = found
        if ids is None:
            problems.append(f"cannot evaluate the default getter {getter.class_qualname.rsplit('.', 1)[-1]}.{getter.method}: {why}")
            return done()
        steps.append(TraceStep("config", f"default ids from {getter.class_qualname.rsplit('.', 1)[-1]}.{getter.method}() = {getter.expression} -> {list(ids)}", getter.location))

    indices: tuple[int, ...] | None = None
    for position, setter in enumerate(capture.chain):
        param = setter.parameter or "layer_ids"
        target = row.qualname if position == 0 else (capture.delegates_to or row.qualname)
        run = run_function(setter.source, {param: ids}, _bindings(num_layers, setter.source, guards, has_attribute_for(target)))
        owner = setter.class_qualname.rsplit(".", 1)[-1]
        branch = "; ".join(s.reason for s in run.steps if s.taken or "is None" in s.condition) or "no branch"
        if run.raised:
            problems.append(f"{owner}.{setter.method} raises {run.raised} for these ids")
            steps.append(TraceStep("setter", f"{owner}.{setter.method}({ids}) raises {run.raised}", setter.location))
            return done()
        writes = [w for w in run.writes if w.target.rsplit(".", 1)[-1] in project.conv.attributes and _as_ids(w.value) is not None]
        nxt = capture.chain[position + 1] if position + 1 < len(capture.chain) else None
        calls = [c for c in run.calls if nxt is not None and c.callee.endswith("." + nxt.method)]
        if writes:
            indices = _as_ids(writes[-1].value)
            steps.append(
                TraceStep(
                    "setter",
                    f"{owner}.{setter.method}: {writes[-1].target} = {writes[-1].expression} -> {list(indices or ())}  [{setter.id_transform}; {branch}]",
                    setter.location,
                )
            )
            break
        if calls:
            ids = calls[-1].arguments[0] if calls[-1].arguments else None
            steps.append(TraceStep("setter", f"{owner}.{setter.method}: hands {calls[-1].argument_sources[0] if calls[-1].argument_sources else ''} = {ids} to {calls[-1].callee}()  [{setter.id_transform}; {branch}]", setter.location))
            continue
        if run.returned_early and not run.writes:
            problems.append(f"{owner}.{setter.method} returns before setting anything")
        else:
            problems.append(f"cannot evaluate {owner}.{setter.method}: {'; '.join(run.unevaluated) or 'no capture attribute written'}")
        steps.append(TraceStep("setter", f"{owner}.{setter.method}: no capture indices set", setter.location))
        return done()
    if indices is None:
        problems.append("the setter chain ended without writing capture indices")
        return done()

    site = capture.site
    if site is None:
        problems.append(f"no capture loop reads the indices ({'; '.join(capture.problems) or 'none found'})")
        return done(indices)
    holder = (capture.holder or "?").rsplit(".", 1)[-1]
    attribute = site.attribute or (capture.setter.writes[-1].rsplit(".", 1)[-1] if capture.setter.writes else None) or next((s.writes[-1].rsplit(".", 1)[-1] for s in capture.chain if s.writes), "capture attribute")
    steps.append(TraceStep("attribute", f"{holder}.{attribute} = {sorted(set(indices)) if len(set(indices)) != len(indices) or list(indices) != sorted(indices) else list(indices)}", site.location))
    loop_range = " ".join((site.loop_range or "").split())
    steps.append(TraceStep("loop", f"{site.function}: for {site.loop_variable} in {loop_range} (single pipeline rank: 0..{num_layers - 1}); {site.mechanism}", site.location))
    if capture.point == F.UNKNOWN:
        problems.append(f"capture point unknown: {capture.point_note}")
        steps.append(TraceStep("point", f"capture point unknown: {capture.point_note}", site.location))
        return done(indices)
    offset = 0 if capture.point == F.INPUT else 1
    steps.append(TraceStep("point", f"capture point {capture.point}: index i yields boundary i{' + 1' if offset else ''} ({capture.point_note})", (capture.point_evidence or (site.location,))[0]))

    reachable = set(range(1, num_layers))
    if capture.embedding_capturable:
        reachable.add(0)
    if capture.last_layer_capturable:
        reachable.add(num_layers)
    dropped: list[tuple[int, str]] = []
    boundaries: set[int] = set()
    for i in indices:
        b = i + offset
        if b in reachable:
            boundaries.add(b)
        elif i < 0:
            dropped.append((i, f"index {i} never equals a loop index (ids are not wrapped like Python negatives)"))
        elif b == 0:
            dropped.append((i, "the embedding (b=0) is never captured by this loop"))
        elif b == num_layers:
            dropped.append((i, f"b={num_layers} (last layer's output) is never captured: the loop records layer inputs only"))
        else:
            dropped.append((i, f"index {i} is outside range(0, {num_layers})"))
    for i, why in dropped:
        steps.append(TraceStep("dropped", f"dropped id {i}: {why}", site.location))
    ordered = tuple(sorted(boundaries))
    steps.append(TraceStep("boundaries", "captured, in loop order: " + ", ".join(describe_boundary(b, num_layers) for b in ordered) if ordered else "nothing is captured"))
    concat = _concat_site(project, capture)
    width = f"{len(ordered)} x {hidden_size} = {len(ordered) * hidden_size}" if hidden_size else f"{len(ordered)} x hidden_size"
    steps.append(TraceStep("concat", f"cat([...], -1) of {len(ordered)} states; fc in_features = {width}", concat))
    return done(indices, ordered, dropped)


def _concat_site(project: Project, capture) -> F.Location | None:
    """Where the captured states are concatenated: the holder's module, else the module
    that defines the draft's fc; None rather than a guess."""
    module = (capture.holder or "").rpartition(".")[0]
    draft_modules = {ff.module for ff in project.files if ff.fc_definitions}
    for wanted in (lambda ff: ff.module == module, lambda ff: ff.module in draft_modules):
        for ff in project.files:
            if wanted(ff) and ff.concat_sites:
                return ff.concat_sites[0].location
    return None


def parse_ids(text: str) -> list[int] | None:
    """``-1,2,30`` -> [-1, 2, 30]; ``default`` -> None."""
    text = text.strip()
    if text.lower() in {"default", ""}:
        return None
    try:
        return [int(x) for x in text.replace(" ", "").strip("[]").split(",") if x]
    except ValueError:
        raise ValueError(f"--layer-ids must be comma-separated integers or 'default', got {text!r}") from None


def trace_json(result: TraceResult) -> dict:
    return {
        "schema": "flowtrace.trace/1",
        "model": result.model,
        "num_layers": result.num_layers,
        "layer_ids": list(result.layer_ids) if result.layer_ids is not None else None,
        "capture_indices": list(result.capture_indices) if result.capture_indices is not None else None,
        "boundaries": list(result.boundaries) if result.boundaries is not None else None,
        "dropped": [{"id": i, "reason": r} for i, r in result.dropped],
        "hidden_size": result.hidden_size,
        "fc_in_features": result.fc_in_features,
        "steps": [{"kind": s.kind, "text": s.text, "file": s.location.file if s.location else None, "line": s.location.line if s.location else None} for s in result.steps],
        "problems": list(result.problems),
    }


def trace_text(result: TraceResult) -> str:
    lines = [f"trace {result.model} (L = {result.num_layers})"]
    for n, s in enumerate(result.steps, 1):
        where = f"  [{s.location}]" if s.location else ""
        lines.append(f"{n:>2}. {s.kind:<10} {s.text}{where}")
    if result.boundaries is not None:
        lines.append(f"=> boundaries {list(result.boundaries)}")
    for p in result.problems:
        lines.append(f"problem: {p}")
    return "\n".join(lines) + "\n"


__all__ = ["TraceResult", "TraceStep", "trace_row", "parse_ids", "trace_json", "trace_text", "CannotEvaluate", "describe_boundary"]

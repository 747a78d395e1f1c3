"""FT026 graph-captured-with-other-ids: the runner captures the device graphs while the model holds other ids than the
draft's."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Iterator

from flowtrace.analysis.serving import GraphCapture, RunnerPath, ServingPlan, SetterCall, serving_plan
from flowtrace.checks.base import Example, Finding, FixExample, Rule
from flowtrace.checks.example_code import CAPTURING_MODEL, causal_lm, module
from flowtrace.model.consequence import Consequence
from flowtrace.model.facts import Location, ProblemKind

if TYPE_CHECKING:
    from flowtrace.analysis.scan import ScanResult

RUNNER = '''\
class ExGraphRunner:
    def __init__(self, model_runner):
        self.model_runner = model_runner
        self.model_runner.model.set_eagle3_layers_to_capture()
        self.capture()

    def capture(self):
        pass


class ExModelRunner:
    def __init__(self, model, layer_ids):
        self.model = model
        self.eagle_aux_hidden_state_layer_ids = layer_ids

    def initialize(self):
        self.graph_runner = ExGraphRunner(self)
        self.model.set_eagle3_layers_to_capture(self.eagle_aux_hidden_state_layer_ids)
'''
"""A graph runner that resets the model to its default ids right before it captures (line 4 of
this block), and a model runner that hands the draft's ids only after building it."""

_CAPTURE_FIRST = '''\
class ExModelRunner:
    def __init__(self, model, layer_ids):
        self.model = model
        self.eagle_aux_hidden_state_layer_ids = layer_ids

    def init_device_graphs(self):
        pass

    def initialize(self):
        self.init_device_graphs()
        self.model.set_eagle3_layers_to_capture(self.eagle_aux_hidden_state_layer_ids)
'''

_FIXED_ORDER = _CAPTURE_FIRST.replace(
    "        self.init_device_graphs()\n"
    "        self.model.set_eagle3_layers_to_capture(self.eagle_aux_hidden_state_layer_ids)\n",
    "        self.model.set_eagle3_layers_to_capture(self.eagle_aux_hidden_state_layer_ids)\n"
    "        self.init_device_graphs()\n",
)

_MODEL = module(CAPTURING_MODEL, causal_lm())
_OFFSET = _MODEL.count("\n") + 2  # the runner block's first line is this line of the example, minus one


class GraphCapturedWithOtherIds(Rule):
    code = "FT026"
    name = "graph-captured-with-other-ids"
    kind = ProblemKind.GRAPH_IDS_DIFFER
    consequence = Consequence.SILENT_WRONG
    summary = "The runner captures the device graphs while the model holds other ids than the draft's."
    rationale = (
        "A captured device graph replays the kernels it recorded: the layers whose states it copies out are "
        "the ones the model held when the graph was captured, whatever the setter is told later. A runner that "
        "calls the setter with no ids (the model's defaults) right before capture, or captures before it hands "
        "the draft's ids over, serves decode and verify batches from the default layers (or none) while prefill, "
        "which runs eagerly, gets the draft's: for every draft whose ids differ from the default, each verify "
        "step feeds the draft states it was not trained on and acceptance collapses; nothing fails. A weight "
        "reload that re-captures the same way brings the defaults back. Hand the setter the draft's ids before "
        "any graph is captured."
    )
    fix = "Pass the draft's ids to the setter call before graph capture (or set them before the graphs are captured)."
    autofix = "flowtrace.fix.codemods.runner_ids:plan"
    valid = (
        Example(
            module(
                _MODEL,
                RUNNER.replace(
                    "        self.model_runner.model.set_eagle3_layers_to_capture()\n",
                    "        self.model_runner.model.set_eagle3_layers_to_capture("
                    "self.model_runner.eagle_aux_hidden_state_layer_ids)\n",
                ),
            ),
            note="the graph runner hands the draft's ids before it captures",
        ),
        Example(module(_MODEL, _FIXED_ORDER), note="the draft's ids are set before the graphs are captured"),
    )
    invalid = (
        Example(
            module(_MODEL, RUNNER),
            line=_OFFSET + 4,
            kind=ProblemKind.GRAPH_IDS_DIFFER,
            message="replay graphs captured with the model's default layers",
            consequence=Consequence.SILENT_WRONG,
            severity="error",
        ),
        Example(
            module(_MODEL, _CAPTURE_FIRST),
            line=_OFFSET + 10,
            kind=ProblemKind.GRAPH_IDS_DIFFER,
            message="captures the graphs before it hands over the draft's ids",
            consequence=Consequence.SILENT_WRONG,
            severity="error",
        ),
    )
    fix_examples = (
        FixExample(
            module(_MODEL, RUNNER),
            module(
                _MODEL,
                RUNNER.replace(
                    "        self.model_runner.model.set_eagle3_layers_to_capture()\n",
                    "        self.model_runner.model.set_eagle3_layers_to_capture("
                    "self.model_runner.eagle_aux_hidden_state_layer_ids)\n",
                ),
            ),
            "the ids the model runner hands over later, reached from the graph runner's own object",
        ),
    )

    def check(self, result: ScanResult) -> Iterator[Finding]:
        plan = serving_plan(result.project.lookup)
        seen: set[Location] = set()
        defaults = _defaults(result)
        for path in plan.startup:
            for capture in path.captures:
                found = self._judge(plan, path, capture, defaults)
                if found is not None and Location(found.file, found.line) not in seen:
                    seen.add(Location(found.file, found.line))
                    yield found

    def _judge(self, plan: ServingPlan, path: RunnerPath, capture: GraphCapture, defaults: str) -> Finding | None:
        before = capture.before
        later = [c for c in path.calls[len(before):] if not c.default]
        if not later:
            return None  # nothing hands the draft's ids after this capture: the graphs hold what prefill holds
        if before and before[-1].default:
            return self._default_call(plan, before[-1], capture, later[0], defaults)
        if not before and not plan.set_before_capture():
            return self._capture_first(plan, capture, later[0])
        return None

    def _default_call(
        self, plan: ServingPlan, call: SetterCall, capture: GraphCapture, later: SetterCall, defaults: str
    ) -> Finding:
        owner = _owner(call.function)
        reload = _reload_words(plan, call)
        return self.finding(
            call.step.location,
            f"{owner} calls {call.step.name}() with no ids ({call.step.location}) before it captures the graphs"
            f" ({capture.step.location}); the draft's ids are handed over only later ({_owner(later.function)},"
            f" {later.step.location}): {plan.replayed} replay graphs captured with the model's default"
            f" layers{defaults}, while prefill runs with the draft's{reload}",
            f"serving:{call.function}",
            f"{call.step.receiver}.{call.step.name}()",
            steps=(
                ("setter call with no ids", call.step.location),
                ("graph capture", capture.step.location),
                ("the draft's ids, too late", later.step.location),
            ),
            consequence=Consequence.SILENT_WRONG,
            effect=(
                f"for every draft whose ids differ from a model's default, {plan.replayed} feed the draft the default"
                " layers' states while prefill feeds the ones it was trained on: acceptance collapses and nothing"
                " fails"
            ),
        )

    def _capture_first(self, plan: ServingPlan, capture: GraphCapture, later: SetterCall) -> Finding:
        owner = _owner(capture.function)
        return self.finding(
            capture.step.location,
            f"{owner} captures the graphs before it hands over the draft's ids ({capture.step.location}, then"
            f" {later.step.location}): {plan.replayed} replay graphs captured while the model held no capture ids,"
            " while prefill runs with the draft's",
            f"serving:{capture.function}",
            f"{capture.step.name}()",
            steps=(("graph capture", capture.step.location), ("the draft's ids, too late", later.step.location)),
            consequence=Consequence.SILENT_WRONG,
            effect=(
                f"{plan.replayed} replay graphs that record no (or the model's initial) capture layers: the draft gets"
                " other states than prefill gives it, or none"
            ),
        )


def _owner(function: str) -> str:
    parts = function.rsplit(".", 2)
    return ".".join(parts[-2:]) if len(parts) >= 2 else function


def _reload_words(plan: ServingPlan, call: SetterCall) -> str:
    """``; a weight reload (X) ...`` when a reload path runs the same call again after start-up."""
    for path in plan.reload:
        again = path.calls[path.reload_from or 0:]
        if any(c.step.location == call.step.location for c in again) and again[-1].default:
            return (
                f"; a weight reload ({_owner(path.entry)}) runs it again and leaves prefill on the defaults too"
            )
    return ""


def _defaults(result: ScanResult) -> str:
    """`` ([2, n // 2, n - 3] in 12 of 14 classes)``: the default the capturing rows hold most."""
    found = Counter(
        row.capture.default_layers for row in result.rows
        if row.capture is not None and row.registered and row.capture.default_layers
    )
    if not found:
        return ""
    expression, count = found.most_common(1)[0]
    total = sum(found.values())
    if total == 1 or count == total:
        return f" (`{expression}`{f' in all {total} classes' if total > 1 else ''})"
    return f" (`{expression}` in {count} of {total} classes)"

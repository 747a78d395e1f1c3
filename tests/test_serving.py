"""The serving path (issue 32): what the engine's runner does with the model, on the fixture
engines ``serving_like`` (an older SGLang's start-up order and the five defects of the serving
path) and ``serving_fixed_like`` (its fixed twin, which must stay silent). Every expected value
is read from the fixtures' code: the line numbers and calls are named in their docstrings and
README.md."""

from __future__ import annotations

import ast
import json
import shutil
import textwrap
from pathlib import Path

import pytest

from fixture_paths import FIXTURES
from flowtrace import api
from flowtrace.analysis.serving import serving_plan
from flowtrace.engines.profiles import rules_directory
from flowtrace.index.build import IndexOptions
from flowtrace.index.index_guards import FirstIndex
from flowtrace.model import facts as F
from flowtrace.model.consequence import Consequence

SERVING = FIXTURES / "serving_like"
FIXED = FIXTURES / "serving_fixed_like"
RUNNER = "sglang/srt/model_executor/model_runner.py"
GRAPHS = "sglang/srt/model_executor/graph_runner.py"
OPTIONS = IndexOptions(use_cache=False, jobs=1)
SERVING_RULES = ("FT004", "FT022", "FT025", "FT026", "FT027")


@pytest.fixture(scope="module")
def broken():
    return api.scan(SERVING, options=OPTIONS)


@pytest.fixture(scope="module")
def fixed():
    return api.scan(FIXED, options=OPTIONS)


def _functions(result) -> dict[str, F.RunnerFunctionFact]:
    return {fn.qualname.split("model_executor.", 1)[-1]: fn for ff in result.files for fn in ff.runner_functions}


def _where(location: F.Location) -> tuple[str, int]:
    return location.file, location.line


# -- runner facts (index/runner_steps.py) ---------------------------------------------------------
def test_runner_steps_keep_order_forks_and_the_ids_each_call_hands(broken):
    fns = _functions(broken)
    init = fns["model_runner.ModelRunner.initialize"].steps
    assert [(s.kind, s.name, s.location.line) for s in init[:2]] == [
        (F.RunnerStepKind.WARMUP, "kernel_warmup", 22), (F.RunnerStepKind.CAPTURE, "init_device_graphs", 23)
    ]
    fork = init[2]
    assert isinstance(fork, F.RunnerFork) and fork.condition == "self.eagle_use_aux_hidden_state"
    (call,), empty = fork.arms
    assert empty == ()
    assert (call.kind, call.location.line, call.ids, call.ids_text, call.receiver) == (
        F.RunnerStepKind.SETTER, 25, F.RunnerIds.GIVEN, "self.eagle_aux_hidden_state_layer_ids", "self.model"
    )
    graph = fns["graph_runner.GraphRunner.__init__"].steps
    (default,), _ = graph[0].arms
    assert (default.location.line, default.ids, default.receiver) == (
        12,
        F.RunnerIds.DEFAULT,
        "self.model_runner.model",
    )
    assert (graph[1].kind, graph[1].name, graph[1].location.line) == (F.RunnerStepKind.CAPTURE, "capture", 13)
    build = fns["model_runner.ModelRunner.init_device_graphs"].steps[-1]
    assert (build.kind, build.name) == (F.RunnerStepKind.BUILD, "sglang.srt.model_executor.graph_runner.GraphRunner")


@pytest.mark.parametrize("text, ids, offset", [
    ("m.set_x()", F.RunnerIds.DEFAULT, None),
    ("m.set_x(None)", F.RunnerIds.DEFAULT, None),
    ("m.set_x(self.ids)", F.RunnerIds.GIVEN, None),
    ("m.set_x(list(self.ids))", F.RunnerIds.GIVEN, None),
    ("m.set_x([i + 1 for i in self.ids])", F.RunnerIds.TRANSFORMED, 1),
    ("m.set_x([i - 2 for i in ids])", F.RunnerIds.TRANSFORMED, -2),
    ("m.set_x([2, 30, -1])", F.RunnerIds.LITERAL, None),
])
def test_which_ids_a_runner_call_hands_over(text, ids, offset):
    from flowtrace.index.runner_steps import classify_ids

    call = ast.parse(text, mode="eval").body
    assert isinstance(call, ast.Call)
    found, _, shift = classify_ids(call)
    assert (found, shift) == (ids, offset)


# -- the plan (analysis/serving.py) ---------------------------------------------------------------
def test_the_start_up_calls_the_setter_three_times_and_captures_with_the_defaults(broken):
    plan = serving_plan(broken.project.lookup)
    path = plan.representative()
    assert path is not None
    assert [(_where(c.step.location), c.phase, c.default) for c in path.calls] == [
        ((RUNNER, 33), "warm-up", True), ((GRAPHS, 12), "graph capture", True), ((RUNNER, 25), "start-up", False),
    ]
    (capture,) = path.captures
    assert _where(capture.step.location) == (GRAPHS, 13)
    assert [_where(c.step.location) for c in capture.before] == [(RUNNER, 33), (GRAPHS, 12)]
    after = [p for p in plan.reload if p.calls[: p.reload_from] == path.calls]
    # the reload re-runs the graph runner's call
    assert after and _where(after[0].calls[-1].step.location) == (GRAPHS, 12)


def test_the_fixed_start_up_sets_the_draft_ids_once_before_capture(fixed):
    path = serving_plan(fixed.project.lookup).representative()
    assert path is not None
    assert [_where(c.step.location) for c in path.calls] == [(RUNNER, 24)]
    (capture,) = path.captures  # the graph runner's file names no marker: the entry call is the capture
    assert _where(capture.step.location) == (RUNNER, 20)
    assert [_where(c.step.location) for c in capture.before] == [(RUNNER, 24)]


# -- findings -------------------------------------------------------------------------------------
def _serving_findings(result):
    return {(f.rule, f.file, f.line): f for f in api.findings(result, SERVING_RULES)}


def test_each_category_is_reported_once_at_the_place_to_fix(broken):
    found = _serving_findings(broken)
    expected = {
        ("FT026", GRAPHS, 12): (
            F.ProblemKind.GRAPH_IDS_DIFFER,
            Consequence.SILENT_WRONG,
            "replay graphs captured with the model's default layers",
        ),
        ("FT025", "sglang/srt/models/marks.py", 33): (
            F.ProblemKind.STALE_LAYER_MARKS,
            Consequence.CRASH_SERVING,
            "the runner calls the setter 3 times at start-up",
        ),
        ("FT027", "sglang/srt/models/dense_moe.py", 48): (
            F.ProblemKind.LAYERS_RUN_WITHOUT_CAPTURE,
            Consequence.CRASH_SERVING,
            "raises on two-batch overlap batches",
        ),
        ("FT004", "sglang/srt/models/unread.py", 55): (
            F.ProblemKind.SETTER_WRITES_UNREAD,
            Consequence.CRASH_SERVING,
            "decides by _is_layer_to_capture",
        ),
        ("FT022", "sglang/srt/models/dense_moe.py", 45): (
            F.ProblemKind.INDEX0_RAISES,
            Consequence.CRASH_SERVING,
            "records `hidden_states + residual`",
        ),
        ("FT022", "sglang/srt/models/gather_first.py", 36): (
            F.ProblemKind.INDEX0_RAISES,
            Consequence.CRASH_SERVING,
            "all_gather(hidden_states + residual)",
        ),
    }
    assert set(found) == set(expected)
    for key, (kind, consequence, fragment) in expected.items():
        f = found[key]
        assert (f.kind, f.consequence) == (kind, consequence), key
        assert fragment in f.message, (key, f.message)
    assert (
        F.Location("sglang/srt/models/gather_first.py", 38)
        in found[("FT022", "sglang/srt/models/gather_first.py", 36)].related
    )


def test_the_all_gather_branch_index_zero_never_takes_raises_nowhere(broken):
    sites = {s.location.line: s for ff in broken.files if ff.path.endswith("dense_moe.py") for s in ff.capture_sites}
    assert sites[43].first_none is None  # under `self.gather_aux and i > self.first_k_dense_replace`
    assert sites[45].first_none == "residual"


def test_the_fixed_twin_is_silent(fixed):
    assert _serving_findings(fixed) == {}


def test_a_path_the_engine_refuses_with_a_draft_is_silent(tmp_path):
    profile = tmp_path / "sglang.toml"
    profile.write_text(
        (rules_directory() / "engines" / "sglang.toml").read_text() + 'speculative_excludes = ["can_run_tbo"]\n'
    )
    result = api.scan(SERVING, options=OPTIONS, profile_files=(profile,))
    assert not [f for f in api.findings(result, ("FT027",))]


# -- link 8: the serving facts on the row's chain ---------------------------------------------------
def test_the_chain_holds_the_serving_path(broken, fixed):
    # dense_moe.py's rows: the runner's start-up as above (prefill holds the draft's ids handed at
    # model_runner.py:25; the graph captured at graph_runner.py:13 holds the defaults set at line 12,
    # and the reload re-runs that call); the forward hands layers after first_k_dense_replace to
    # run_layers_overlapped (dense_moe.py:48) without the collector, on `can_run_tbo` batches
    serving = broken.model("DenseMoeForCausalLM").chain.serving
    assert [(p.name, [_where(c.step.location) for c in p.calls], _where(p.at)) for p in serving.phases] == [
        ("prefill", [(RUNNER, 25)], (RUNNER, 25)),
        ("graph replay", [(GRAPHS, 12)], (GRAPHS, 13)),
        ("after a weight reload", [(GRAPHS, 12)], (GRAPHS, 12)),
    ]
    assert [(p.run.location.line, p.records, p.reads, p.batches()) for p in serving.skipping] == [
        (48, False, "layers_to_capture", "two-batch overlap batches"),
    ]
    assert serving.unread is None
    # unread.py: set_eagle3_layers_to_capture (line 55) fills layers_to_capture; UnreadModel.forward
    # records at line 32 when the layer's `_is_layer_to_capture` mark is set, which nothing sets
    unread = broken.model("UnreadForCausalLM").chain.serving.unread
    assert unread is not None
    assert (_where(unread.setter_at), unread.setter_method, unread.writes, unread.reads, _where(unread.site_at)) == (
        ("sglang/srt/models/unread.py", 55),
        "set_eagle3_layers_to_capture",
        ("layers_to_capture",),
        ("_is_layer_to_capture",),
        ("sglang/srt/models/unread.py", 32),
    )
    assert unread.function.endswith("UnreadModel.forward")
    # the fixed twin: the draft's ids set once (model_runner.py:24) before the capture at line 20
    # (held by every phase), the collector handed over, the marks set too
    good = fixed.model("DenseMoeForCausalLM").chain.serving
    assert {tuple(_where(c.step.location) for c in p.calls) for p in good.phases} == {((RUNNER, 24),)}
    assert good.skipping == () and good.unread is None
    assert fixed.model("UnreadForCausalLM").chain.serving.unread is None


# -- trace, compat, the matrix ------------------------------------------------------------------------
def _phases(trace):
    return {p.phase: (p.outcome, p.boundaries) for p in trace.phases}


def test_trace_names_what_each_phase_serves(broken, fixed):
    row = broken.model("DenseMoeForCausalLM")
    t = api.trace(broken, row.name, [-1, 2, 30], 61)
    assert (t.outcome, t.raises_at) == (F.Outcome.RAISES, F.Location("sglang/srt/models/dense_moe.py", 45))
    # the default [2, n // 2, n - 3] at n = 61, recorded before layer i (b = i)
    assert _phases(t)["graph replay"] == (F.Outcome.CAPTURES, (2, 30, 58))
    assert _phases(t)["after a weight reload"] == (F.Outcome.CAPTURES, (2, 30, 58))
    assert [(b.batches, b.at.line) for b in t.batch_paths] == [("two-batch overlap batches", 48)]
    good = api.trace(fixed, row.name, [-1, 2, 30], 61)
    assert good.boundaries == (0, 3, 31)
    assert set(_phases(good).values()) == {(F.Outcome.CAPTURES, (0, 3, 31))}
    assert good.batch_paths == ()


def test_marks_that_accumulate_serve_the_union_of_the_runner_calls(broken):
    t = api.trace(broken, "MarksForCausalLM", [-1, 2, 30], 61)
    assert t.boundaries == (0, 3, 31)  # the draft's ids alone, as the setter maps them (+1)
    assert _phases(t)["prefill"] == (F.Outcome.CAPTURES, (0, 2, 3, 30, 31, 58))
    assert _phases(t)["graph replay"] == (F.Outcome.CAPTURES, (2, 30, 58))


def test_a_setter_writing_what_the_loop_never_reads_captures_nothing(broken):
    row = broken.model("UnreadForCausalLM")
    assert row.support == "broken" and row.chain.has(F.ProblemKind.SETTER_WRITES_UNREAD)
    t = api.trace(broken, row.name, [-1, 2, 30], 61)
    # the wrapper's unpacking
    assert (t.outcome, t.raises_at) == (F.Outcome.RAISES, F.Location("sglang/srt/models/unread.py", 48))
    doc = json.loads(json.dumps(_row_json(broken, "UnreadForCausalLM")))
    assert doc["capture"]["outcome"] == "captures_nothing"


def _row_json(result, name):
    from flowtrace.render.scan_json import scan_document

    return next(m for m in scan_document(result, []).get("models", []) if m["class"] == name)


def test_the_matrix_says_which_ids_each_phase_holds(broken, fixed):
    serving = _row_json(broken, "DenseMoeForCausalLM")["capture"]["serving"]
    assert [(p["phase"], p["ids"], p["at"]) for p in serving["phases"]] == [
        ("prefill", "the draft's ids", f"{RUNNER}:25"),
        ("graph replay", "the model's default ids", f"{GRAPHS}:13"),
        ("after a weight reload", "the model's default ids", f"{GRAPHS}:12"),
    ]
    assert [(b["batches"], b["outcome"], b["at"]) for b in serving["batch_paths"]] == [
        ("two-batch overlap batches", "raises", "sglang/srt/models/dense_moe.py:48")
    ]
    marks = _row_json(broken, "MarksForCausalLM")["capture"]["serving"]["phases"][0]
    assert marks["ids"] == "the union of the model's default and the draft's ids (3 calls)"
    assert [p["ids"] for p in _row_json(fixed, "DenseMoeForCausalLM")["capture"]["serving"]["phases"]] == [
        "the draft's ids"
    ] * 3


def _configs(tmp_path: Path) -> tuple[Path, Path]:
    target, draft = tmp_path / "target.json", tmp_path / "draft.json"
    target.write_text(
        json.dumps({"architectures": ["DenseMoeForCausalLM"], "num_hidden_layers": 61, "hidden_size": 7168})
    )
    draft.write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLMEagle3"],
                "hidden_size": 7168,
                "eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 2, 30]},
            }
        )
    )
    return target, draft


def test_compat_is_mismatch_while_graph_replay_serves_the_defaults(broken, fixed, tmp_path):
    target, draft = _configs(tmp_path)
    bad = api.compat(broken, target, draft)
    assert bad.verdict == "MISMATCH"
    phases = [d.phase.phase for d in bad.differences if d.kind == "phase"]
    assert phases == ["graph replay", "after a weight reload"]
    assert bad.no_fix is not None and "FT026" in bad.no_fix
    assert any("two-batch overlap batches" in w for w in bad.warnings)
    good = api.compat(fixed, target, draft)
    assert (good.verdict, good.served, good.warnings) == ("MATCH", (0, 3, 31), ())


def test_fix_then_compat_says_match_without_touching_the_draft(tmp_path):
    """The founding story on the fixture: `fix --write`, then `compat` of ids [-1, 2, 30]."""
    from flowtrace.fix.run import fix_findings
    from flowtrace.fix.write import write_edits

    tree = tmp_path / "engine"
    shutil.copytree(SERVING, tree)
    target, draft = _configs(tmp_path)
    before = draft.read_bytes()
    result = api.scan(tree, options=OPTIONS)
    report = fix_findings(result, api.findings(result), options=OPTIONS)
    assert {v.proposal.rule for v in report.offered} >= {"FT022", "FT026"}
    write_edits(tree, report.edits())
    patched = (tree / GRAPHS).read_text()
    assert (
        "self.model_runner.model.set_eagle3_layers_to_capture(self.model_runner.eagle_aux_hidden_state_layer_ids)"
        in patched
    )
    after = api.compat(api.scan(tree, options=OPTIONS), target, draft)
    assert (after.verdict, after.served) == ("MATCH", (0, 3, 31))
    assert draft.read_bytes() == before


def test_the_runner_codemod_needs_ids_reached_from_its_own_object():
    from flowtrace.analysis.serving import SetterCall
    from flowtrace.fix.codemods.runner_ids import reached_ids
    from flowtrace.fix.model import CannotFix

    def call(function, receiver, ids, text):
        step = F.RunnerStep(
            F.RunnerStepKind.SETTER, "set_x", F.Location("r.py", 1), receiver=receiver, ids=ids, ids_text=text
        )
        return SetterCall(step, function, "start-up")

    later = call("pkg.ModelRunner.initialize", "self.model", F.RunnerIds.GIVEN, "self.cfg.ids")
    assert (
        reached_ids(call("pkg.GraphRunner.__init__", "self.runner.model", F.RunnerIds.DEFAULT, ""), later)
        == "self.runner.cfg.ids"
    )
    assert (
        reached_ids(call("pkg.ModelRunner._dummy_run", "self.model", F.RunnerIds.DEFAULT, ""), later) == "self.cfg.ids"
    )
    with pytest.raises(CannotFix):
        reached_ids(call("pkg.GraphRunner.__init__", "model", F.RunnerIds.DEFAULT, ""), later)
    with pytest.raises(CannotFix):
        reached_ids(
            call("pkg.GraphRunner.__init__", "self.runner.model", F.RunnerIds.DEFAULT, ""),
            call("pkg.ModelRunner.initialize", "self.model", F.RunnerIds.GIVEN, "ids"),
        )


# -- category 5: the loop index's guards (index/index_guards.py) ----------------------------------------
def _first(body: str) -> tuple[FirstIndex, ast.For, ast.Call]:
    fn = ast.parse(textwrap.dedent(body)).body[0]
    assert isinstance(fn, ast.FunctionDef)
    loop = next(n for n in ast.walk(fn) if isinstance(n, ast.For))
    call = next(
        n
        for n in ast.walk(loop)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "append"
    )
    return FirstIndex(fn, loop), loop, call


@pytest.mark.parametrize("test, bound, unreachable", [
    ("i > self.k", "", False),  # nothing says k is not negative
    ("i > self.k", "        end = self.k\n", True),  # k bounds the loop: a layer position, >= 0
    ("i >= self.k", "        end = self.k\n", False),  # k may be 0
    ("i != 0", "", True),
    ("i == 0", "", False),
    ("i > self.start_layer", "", True),
    ("i >= self.start_layer", "", False),
    ("i < self.end_layer", "", False),
    ("self.flag and i > 0", "", True),
    ("self.flag or i > 0", "", False),
    ("not i", "", False),
    ("i", "", True),
])
def test_a_branch_the_first_index_cannot_take(test, bound, unreachable):
    found, loop, call = _first(
        "def forward(self, h):\n"
        "        end = self.end_layer\n"
        f"{bound}"
        "        for i in range(self.start_layer, end):\n"
        f"            if {test}:\n"
        "                aux.append(h + r)\n"
    )
    assert found.unreachable(loop.body, call) is unreachable


def test_an_else_arm_is_judged_by_the_test_it_skips():
    found, loop, call = _first(
        "def forward(self, h):\n"
        "        for i in range(self.start_layer, self.end_layer):\n"
        "            if i < self.end_layer:\n"
        "                pass\n"
        "            else:\n"
        "                aux.append(h + r)\n"
    )
    assert found.unreachable(loop.body, call)


def test_ids_the_runner_shifts_count_like_a_shift_in_the_setter(tmp_path):
    """A runner that hands ``[i + 1 for i in ids]`` (fixed twin, one call before capture): every
    phase traces the shifted ids, as if the setter added one more."""
    tree = tmp_path / "engine"
    shutil.copytree(FIXED, tree)
    runner = tree / RUNNER
    runner.write_text(runner.read_text().replace(
        "set_eagle3_layers_to_capture(self.eagle_aux_hidden_state_layer_ids)",
        "set_eagle3_layers_to_capture([i + 1 for i in self.eagle_aux_hidden_state_layer_ids])",
    ))
    result = api.scan(tree, options=OPTIONS)
    t = api.trace(result, "DenseMoeForCausalLM", [1, 2, 30], 61)
    # the setter adds one to [2, 3, 31]: indices [3, 4, 32], recorded before layer i (b = i)
    assert {p.phase: (p.ids, p.boundaries) for p in t.phases}["graph replay"] == ((2, 3, 31), (3, 4, 32))


def test_functions_whose_text_names_no_callee_are_not_walked_and_nothing_is_lost():
    """``runner_functions`` spares finding the calls of a function whose ASCII text spells no
    name that could make it matter (a setter, a capture, a warm-up; a function already kept):
    the facts are those of reading every function, on the fixture's runner files and where a
    name is spelled with a letter the parser normalises (a fullwidth ``ｓ`` is ``s``)."""
    from flowtrace.engines.profiles import Conventions, select_profiles
    from flowtrace.index.runner_steps import runner_functions
    from flowtrace.index.syntax import SourceText

    conv = Conventions.merge(select_profiles(SERVING, None))
    setter = next(s for s in sorted(conv.setters) if s[0].isalpha())
    wide = chr(ord(setter[0]) - ord("a") + ord("ａ")) + setter[1:]
    spelled = (
        f"class R:\n    def step_a(self):\n        self.model.{wide}(self.ids)\n\n"
        "    def first(self):\n        self.step_a()\n\n    def second(self):\n        self.ｓtep_a()\n\n"
        "    def idle(self):\n        return 1\n"
    )
    sources = [(SERVING / name).read_text() for name in (RUNNER, GRAPHS)] + [spelled]
    for source in sources:
        tree = ast.parse(source)
        lines = SourceText(source, tree).lines
        gated = runner_functions("f.py", "m", tree, conv, {}, lines)
        assert gated == runner_functions("f.py", "m", tree, conv, {})
    assert [fn.name for fn in gated] == ["step_a", "first", "second"]
    assert [(s.kind, s.name) for s in gated[0].steps] == [(F.RunnerStepKind.SETTER, setter)]


def test_the_byte_gate_is_its_definition():
    """``wanted``: a file calls an entry setter (``.<setter>(``) or defines a serving entry
    (``def <name>(``), as bytes; the entries are found in one scan, with the same verdict as a
    search for each name."""
    import random

    from flowtrace.engines.profiles import Conventions, select_profiles
    from flowtrace.index.runner_steps import _serving_names, wanted

    conv = Conventions.merge(select_profiles(SERVING, None))
    names = sorted(_serving_names(conv))
    pieces = [b"def ", b"async ", b"un", b"x", b" ", b"(", b"\n", b"def def ", b".", *(n.encode() for n in names)]
    rng = random.Random(5)
    samples = [b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 8))) for _ in range(3000)]
    samples += [f"def {n}(".encode() for n in names] + [f"def {n} (".encode() for n in names]
    hits = 0
    for data in samples:
        expected = any(f".{s}(".encode() in data for s in conv.setters) or any(
            f"def {n}(".encode() in data for n in names
        )
        hits += expected
        assert wanted(data, conv) == expected, data
    assert 0 < hits < len(samples)

"""Traces on the fixture engines: boundaries follow from each pattern's stated semantics."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from flowtrace import api
from flowtrace.cli.main import main

from fixture_paths import SGLANG_LIKE, VLLM_LIKE

L = 32


@pytest.mark.parametrize(
    "model, ids, expected",
    [
        # plus one, capture before layer i: id i -> index i + 1 -> boundary i + 1; -1 -> the embedding
        ("AlphaForCausalLM", [-1, 2, 30], (0, 3, 31)),
        ("AlphaForCausalLM", None, (2, 16, 29)),
        # identity, capture after layer i: id i -> boundary i + 1; -1 never matches a loop index
        # (beta.py records `hidden_states` alone while its layers return the residual apart: the
        # slots are what layer b - 1 returns first, at the boundaries the indices name)
        ("BetaForCausalLM", [-1, 2, 30], (3, 31)),
        ("BetaForCausalLM", [0, 15, 31], (1, 16, 32)),
        ("BetaForCausalLM", None, (2, 16, 29)),  # default [1, n//2 - 1, n - 4] + 1
        # conditional: plus one only when the first id is 1
        ("GammaForCausalLM", [1, 15, 28], (2, 16, 29)),
        ("GammaForCausalLM", [-1, 2, 30], (2, 30)),
        # inherited and delegated paths give the same answer as their base
        ("DeltaForCausalLM", [-1, 2, 30], (0, 3, 31)),
        ("OmegaVLForConditionalGeneration", [1, 15, 28], (2, 16, 29)),
        # plus one then identity inner setter, captured after layer i (output): id i -> boundary i + 2
        ("KappaMoeForCausalLM", [0, 2, 30], (2, 4, 32)),
    ],
)
def test_sglang_like_boundaries(sglang_scan, model, ids, expected):
    traced = api.trace(sglang_scan, model, ids, L)
    assert traced.named_boundaries == expected, traced.problems
    delta = model == "BetaForCausalLM"
    assert str(traced.outcome) == ("captures_deltas" if delta else "captures")
    assert traced.boundaries == (None if delta else expected)


def test_vllm_like_boundaries(vllm_scan):
    # identity ids, helper labels the stream after layer idx as idx + 1 (input point), plus the embedding
    assert api.trace(vllm_scan, "LlamaForCausalLM", [0, 2, 32], L).boundaries == (0, 2, 32)
    assert api.trace(vllm_scan, "LlamaForCausalLM", None, L).boundaries == (2, 16, 29)  # default getter
    assert api.trace(vllm_scan, "DeepseekV3ForCausalLM", [-1, 5, 32], L).boundaries == (5, 32)


def test_dropped_ids_are_explained(sglang_scan):
    traced = api.trace(sglang_scan, "AlphaForCausalLM", [30, 31], L)
    assert traced.boundaries == (31,)
    ((dropped_id, reason),) = traced.dropped
    assert dropped_id == 32 and "never captured" in reason


def test_capture_order_is_loop_order(sglang_scan):
    assert api.trace(sglang_scan, "AlphaForCausalLM", [30, -1, 2], L).boundaries == (0, 3, 31)


def test_problems_for_models_that_cannot_capture(sglang_scan):
    assert api.trace(sglang_scan, "PlainForCausalLM", [1], L).boundaries is None
    zeta = api.trace(sglang_scan, "ZetaForCausalLM", [1], L)
    assert zeta.boundaries is None and any("no capture loop" in p for p in zeta.problems)


def test_every_step_names_a_location(sglang_scan):
    traced = api.trace(sglang_scan, "OmegaVLForConditionalGeneration", [1, 15, 28], L, hidden_size=64)
    kinds = [s.kind for s in traced.steps]
    assert [k for k in kinds if k != "branch"][:3] == ["config", "setter", "setter"]
    assert all(s.location is not None for s in traced.steps if s.kind in {"setter", "attribute", "loop", "point"})
    assert traced.fc_in_features == 3 * 64


def test_trace_cli_json_and_exit_codes(tmp_path):
    runner = CliRunner()
    out = runner.invoke(
        main,
        [
            "trace",
            str(SGLANG_LIKE),
            "-m",
            "AlphaForCausalLM",
            "--layer-ids",
            "-1,2,30",
            "-L",
            "32",
            "--format",
            "json",
            "--no-cache",
        ],
    )
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert doc["schema"] == "flowtrace.trace/1" and doc["boundaries"] == [0, 3, 31]
    bad = runner.invoke(main, ["trace", str(SGLANG_LIKE), "-m", "NoSuchModel", "-L", "32", "--no-cache"])
    assert bad.exit_code == 2 and "NoSuchModel" in bad.output
    ids = runner.invoke(
        main, ["trace", str(SGLANG_LIKE), "-m", "AlphaForCausalLM", "--layer-ids", "a,b", "-L", "32", "--no-cache"]
    )
    assert ids.exit_code == 2
    cannot = runner.invoke(main, ["trace", str(SGLANG_LIKE), "-m", "PlainForCausalLM", "-L", "32", "--no-cache"])
    assert cannot.exit_code == 1
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 16, "hidden_size": 8}))
    via_config = runner.invoke(
        main,
        [
            "trace",
            str(VLLM_LIKE),
            "-m",
            "LlamaForCausalLM",
            "--target-config",
            str(cfg),
            "--format",
            "json",
            "--no-cache",
        ],
    )
    assert json.loads(via_config.stdout)["boundaries"] == [2, 8, 13]


# -- a registered target without the setter: what the runner does with it -----------------------

RUNNER = "sglang/srt/model_executor/model_runner.py"


def test_unguarded_runner_call_raises_for_a_target_without_the_setter(sglang_scan):
    # model_runner.py:16 calls self.model.set_eagle3_layers_to_capture(...) with no model test
    # before it; plain.py's PlainForCausalLM has no such method
    traced = api.trace(sglang_scan, "PlainForCausalLM", [1, 2], L)
    assert traced.outcome == "raises" and str(traced.raises_at) == f"{RUNNER}:16"
    assert "AttributeError" in traced.reason and traced.boundaries is None
    # a target with the setter passes the same call: the runner is no step of its trace
    alpha = api.trace(sglang_scan, "AlphaForCausalLM", [-1, 2, 30], L)
    assert alpha.outcome == "captures" and all(s.kind != "runner" for s in alpha.steps)


def test_interface_check_through_a_predicate_raises_at_the_check(vllm_scan):
    # vllm_like/v1/worker/model_runner.py:18-19 `if not supports_eagle3(self.model): raise`,
    # supports_eagle3 = isinstance(model, SupportsEagle3) (interfaces.py); plainlm.py does not
    # declare it
    traced = api.trace(vllm_scan, "PlainLMForCausalLM", [1, 2], L)
    assert traced.outcome == "raises" and str(traced.raises_at) == "vllm/v1/worker/model_runner.py:19"
    assert "SupportsEagle3" in traced.reason
    assert api.trace(vllm_scan, "LlamaForCausalLM", [0, 2, 32], L).outcome == "captures"



def test_a_class_with_the_setter_still_meets_the_interface_check_first(vllm_scan):
    # ownsetter.py:31-32 defines set_aux_hidden_state_layers on OwnSetterForCausalLM, whose bases
    # (l.27) are only Module: supports_eagle3 (interfaces.py) is False, and the runner's check at
    # model_runner.py:18-19 raises before its setter call at l.23, so the setter never runs
    traced = api.trace(vllm_scan, "OwnSetterForCausalLM", [1, 2], L)
    assert traced.outcome == "raises" and str(traced.raises_at) == "vllm/v1/worker/model_runner.py:19"
    assert "SupportsEagle3" in traced.reason and traced.boundaries is None
    assert [s.kind for s in traced.steps] == ["runner"]

_GUARDED_RUNNERS = {
    # hasattr test around the call, a warning otherwise: the target is skipped, nothing captured
    "warns": (
        "class ModelRunner:\n"
        "    def __init__(self, model, ids=None):\n"
        "        self.model, self.ids = model, ids\n"
        "\n"
        "    def init_capture(self):\n"
        "        if hasattr(self.model, 'set_eagle3_layers_to_capture'):\n"
        "            self.model.set_eagle3_layers_to_capture(self.ids)\n"
        "        else:\n"
        "            print('no aux hidden states')\n",
        "captures_nothing", None,
    ),
    # negated hasattr test that returns early: skipped as well
    "returns": (
        "def configure(model, ids):\n"
        "    if not hasattr(model, 'set_eagle3_layers_to_capture'):\n"
        "        return\n"
        "    model.set_eagle3_layers_to_capture(ids)\n",
        "captures_nothing", None,
    ),
    # negated hasattr test that raises: the run ends at the raise (line 3), not at the call
    "refuses": (
        "def configure(model, ids):\n"
        "    if not hasattr(model, 'set_eagle3_layers_to_capture'):\n"
        "        raise ValueError('the model cannot capture')\n"
        "    model.set_eagle3_layers_to_capture(ids)\n",
        "raises", 3,
    ),
}


@pytest.mark.parametrize("variant", sorted(_GUARDED_RUNNERS))
def test_guarded_runner_call_is_decided_per_call_site(tmp_path, variant):
    import shutil

    from flowtrace.index.build import IndexOptions

    source, outcome, line = _GUARDED_RUNNERS[variant]
    tree = tmp_path / "engine"
    shutil.copytree(SGLANG_LIKE, tree)
    (tree / RUNNER).write_text(source)
    scan = api.scan(tree, options=IndexOptions(use_cache=False, jobs=1))
    traced = api.trace(scan, "PlainForCausalLM", [1, 2], L)
    assert traced.outcome == outcome, traced.reason
    assert (str(traced.raises_at) if traced.raises_at else None) == (f"{RUNNER}:{line}" if line else None)
    if outcome == "captures_nothing":  # the guarded site is still shown, without a raise
        assert [s.kind for s in traced.steps] == ["runner"] and "skips" in traced.steps[0].text


def test_layer_flag_setter_wraps_negative_ids_and_raises_past_the_stack():
    # layer_flag.py: setattr(self.layers[i], flag, True) (l.18), read back before layer i (l.25,
    # b=i), ids unchanged: -1 marks layer L-1 (Python list indexing), 32 is past the stack
    from flowtrace.index.build import IndexOptions
    from fixture_paths import FIXTURES

    shapes = FIXTURES.parent.parent / "probe" / "agreement_engines" / "shapes"
    scan = api.scan(shapes, options=IndexOptions(use_cache=False, jobs=1))
    assert api.trace(scan, "FlagForCausalLM", [-1, 2, 30], L).boundaries == (2, 30, 31)
    past = api.trace(scan, "FlagForCausalLM", [0, 2, 32], L)
    assert past.outcome == "raises" and str(past.raises_at).endswith("models/layer_flag.py:18")

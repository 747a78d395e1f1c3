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
    assert traced.boundaries == expected, traced.problems


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
    out = runner.invoke(main, ["trace", str(SGLANG_LIKE), "-m", "AlphaForCausalLM", "--layer-ids", "-1,2,30", "-L", "32", "--format", "json", "--no-cache"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert doc["schema"] == "flowtrace.trace/1" and doc["boundaries"] == [0, 3, 31]
    bad = runner.invoke(main, ["trace", str(SGLANG_LIKE), "-m", "NoSuchModel", "-L", "32", "--no-cache"])
    assert bad.exit_code == 2 and "NoSuchModel" in bad.output
    ids = runner.invoke(main, ["trace", str(SGLANG_LIKE), "-m", "AlphaForCausalLM", "--layer-ids", "a,b", "-L", "32", "--no-cache"])
    assert ids.exit_code == 2
    cannot = runner.invoke(main, ["trace", str(SGLANG_LIKE), "-m", "PlainForCausalLM", "-L", "32", "--no-cache"])
    assert cannot.exit_code == 1
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 16, "hidden_size": 8}))
    via_config = runner.invoke(main, ["trace", str(VLLM_LIKE), "-m", "LlamaForCausalLM", "--target-config", str(cfg), "--format", "json", "--no-cache"])
    assert json.loads(via_config.stdout)["boundaries"] == [2, 8, 13]

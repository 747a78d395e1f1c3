"""compat answers the whole question (issue 27): no fix the draft itself contradicts, a draft
from a deeper target called what it is, and what went unchecked said aloud.

Expected values come from the fixtures: vllm_like's LlamaForCausalLM records index i before
layer i runs (identity: id i -> b=i) over range(0, L); sglang_like's GammaForCausalLM adds one
(id i -> index i+1) and drops indices outside range(0, L) (gamma.py:40).
"""

from __future__ import annotations

import json

from click.testing import CliRunner

from fixture_paths import SGLANG_LIKE, VLLM_LIKE
from flowtrace import api
from flowtrace.render.compat_json import compat_json
from flowtrace.cli.main import main
from test_checkpoint import tensors, write_safetensors


def _target(tmp_path, arch, layers=32, hidden=64):
    path = tmp_path / "target.json"
    path.write_text(json.dumps({"architectures": [arch], "num_hidden_layers": layers, "hidden_size": hidden}))
    return path


def _draft(folder, ids, **extra):
    folder.mkdir(exist_ok=True)
    data = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids},
        **extra,
    }
    (folder / "config.json").write_text(json.dumps(data))
    return folder


def _compat(tree, target, draft, *more):
    return CliRunner().invoke(
        main, ["compat", str(tree), "--target-config", str(target), "--draft-config", str(draft), "--no-cache", *more]
    )


def test_weights_that_contradict_the_config_get_no_fix_for_the_configs_width(tmp_path, vllm_scan):
    # fc.weight [64, 128] = 2 x 64 while the config names 3 ids: setting 3 ids would build a
    # 192-wide fc input the weights cannot take.
    draft = _draft(tmp_path / "draft", [2, 16, 29], target_hidden_size=64)
    write_safetensors(draft / "model.safetensors", tensors({"fc.weight": ("BF16", [64, 128])}))
    verdict = api.compat(vllm_scan, _target(tmp_path, "LlamaForCausalLM"), draft, trained_with="boundary")
    assert verdict.verdict == "MISMATCH" and verdict.suggestions == ()
    assert verdict.no_fix is not None and "takes 2 x 64, the config names 3 ids" in verdict.no_fix
    out = _compat(VLLM_LIKE, tmp_path / "target.json", draft, "--trained-with", "boundary")
    assert out.exit_code == 1
    assert "fix: set" not in out.stdout and "fix: none: the weights contradict the draft config" in out.stdout
    assert compat_json(verdict)["no_fix"] == verdict.no_fix


def test_a_draft_id_past_the_targets_layers_does_not_fit(tmp_path, sglang_scan):
    # specforge id 40 means b=41; the target has L = 32 boundaries past the embedding: ids the
    # convention cannot mean are an input error (exit 2) naming the valid range -1..31.
    draft = _draft(tmp_path / "draft", [1, 15, 40], target_hidden_size=64)
    _target(tmp_path, "GammaForCausalLM")
    out = _compat(SGLANG_LIKE, tmp_path / "target.json", draft / "config.json")
    assert out.exit_code == 2
    (line,) = out.stderr.splitlines()
    assert "[40] outside -1..31" in line and "this draft does not fit this target (L = 32)" in line
    assert "code change needed" not in out.output and "fix: set" not in out.output


def test_a_draft_folder_with_only_pytorch_model_bin_says_the_width_went_unchecked(tmp_path, vllm_scan):
    draft = _draft(tmp_path / "draft", [0, 16, 29], target_hidden_size=64)
    (draft / "pytorch_model.bin").write_bytes(b"PK\x03\x04 not read")
    verdict = api.compat(vllm_scan, _target(tmp_path, "LlamaForCausalLM"), draft, trained_with="boundary")
    assert verdict.checkpoint is None
    assert [w for w in verdict.warnings if w.startswith("unchecked:")] == [
        f"unchecked: {draft} has only pytorch_model.bin; flowtrace reads safetensors headers only (a .bin file is a"
        " pickle, never loaded), so the fc width was not checked against the draft config's ids"
    ]
    out = _compat(VLLM_LIKE, tmp_path / "target.json", draft, "--trained-with", "boundary")
    # the ids match: identity engine, boundaries 0,16,29
    assert out.exit_code == 0 and "warning: unchecked:" in out.stdout


def test_a_draft_hidden_size_unlike_the_targets_is_warned(tmp_path, vllm_scan):
    draft = _draft(tmp_path / "draft", [0, 16, 29], hidden_size=32)  # no target_hidden_size
    verdict = api.compat(
        vllm_scan, _target(tmp_path, "LlamaForCausalLM"), draft / "config.json", trained_with="boundary"
    )
    (warning,) = verdict.warnings
    assert (
        warning.startswith("width: the draft's hidden_size 32 differs from the target's 64")
        and "3 x 32 = 96" in warning
        and "3 x 64 = 192" in warning
    )
    # says which width the fc takes
    same = _draft(tmp_path / "same", [0, 16, 29], hidden_size=32, target_hidden_size=64)
    assert api.compat(vllm_scan, tmp_path / "target.json", same / "config.json", trained_with="boundary").warnings == ()

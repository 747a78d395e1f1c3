"""Speculative methods as profile data: one engine serving EAGLE-3 and DFlash side by side.

The fixture engine (tests/fixtures/methods/sglang_methods, its README tabulates it) has, per
model, an EAGLE-3 setter and a DFlash setter: sharing the loop and the +1, adding its own +1
through an inner model's setter, forgetting the +1, and a wrapper delegating to a text model
that has no DFlash setter. Every expectation below is read off that code: the capture loop
records a layer's input, so index i is boundary i, and a +1 setter turns id i (the output of
layer i) into boundary i + 1.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from fixture_paths import LMDEPLOY_LIKE, VLLM_LIKE
from fixture_paths import line_of as _line
from flowtrace import api
from flowtrace.cli.main import main
from flowtrace.engines.profiles import Conventions, ProfileError, load_all, load_profile
from flowtrace.model.facts import Outcome, ProblemKind

FIXTURE = Path(__file__).parent / "fixtures" / "methods" / "sglang_methods"
MODELS = FIXTURE / "sglang" / "srt" / "models"
L = 32


@pytest.fixture(scope="module")
def eagle3():
    return api.scan(FIXTURE, options=api.IndexOptions(use_cache=False, jobs=1))


@pytest.fixture(scope="module")
def dflash():
    return api.scan(FIXTURE, options=api.IndexOptions(use_cache=False, jobs=1), method="dflash")


def _support(result) -> dict[str, str]:
    return {r.name: r.support for r in result.rows if r.registered}


# -- profiles -------------------------------------------------------------------------------


def test_the_bundled_profiles_declare_their_methods_with_eagle3_the_default():
    profiles = {p.name: p for p in load_all()}
    sglang, vllm, lmdeploy = profiles["sglang"], profiles["vllm"], profiles["lmdeploy"]
    assert [m.name for m in sglang.methods_served] == ["eagle3", "dflash", "dspark"]
    assert sglang.default_method.name == "eagle3"
    # the older keys read the default method's values: what the probe and family detection use
    assert sglang.setters == ("set_eagle3_layers_to_capture",)
    dflash = next(m for m in sglang.methods_served if m.name == "dflash")
    assert dflash.setters == ("set_dflash_layers_to_capture",)
    assert dflash.layer_id_keys == ("dflash_config.target_layer_ids", "target_layer_ids")
    assert dflash.default_function == "build_target_layer_ids"
    # vLLM serves DFlash through the EAGLE-3 setter, adding 1 to the draft's ids
    vllm_dflash = next(m for m in vllm.methods_served if m.name == "dflash")
    assert vllm_dflash.setters == vllm.setters and vllm_dflash.id_offset == 1
    assert lmdeploy.method == "eagle3" and [m.engine_name for m in lmdeploy.methods_served] == ["eagle3", "dflash"]


def _profile(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "p.toml"
    path.write_text('[engine]\nname = "x"\n' + body)
    return path


def test_a_profile_without_methods_has_one_from_its_older_keys(tmp_path):
    p = load_profile(_profile(tmp_path, '[capture]\nsetters = ["set_x"]\n[draft]\nlayer_id_keys = ["k"]\n'))
    (only,) = p.methods_served
    assert (only.name, only.title, only.default, only.setters, only.layer_id_keys) == (
        "eagle3",
        "EAGLE-3",
        True,
        ("set_x",),
        ("k",),
    )


def test_method_tables_are_checked(tmp_path):
    with pytest.raises(ProfileError, match=r"\[methods.a\] has unknown key\(s\) setter "):
        load_profile(_profile(tmp_path, '[methods.a]\nsetter = ["s"]\n'))
    with pytest.raises(ProfileError, match="more than one method is marked default"):
        load_profile(_profile(tmp_path, "[methods.a]\ndefault = true\n[methods.b]\ndefault = true\n"))
    with pytest.raises(ProfileError, match=r"\[methods.a\] setters = \('s',\) differs from the older key's"):
        load_profile(_profile(tmp_path, '[capture]\nsetters = ["t"]\n[methods.a]\nsetters = ["s"]\n'))
    with pytest.raises(ProfileError, match="default_function needs default_arguments"):
        load_profile(_profile(tmp_path, '[methods.a]\ndefault_function = "f"\n'))


def test_the_default_method_merges_to_the_conventions_of_old_and_another_method_is_cached_apart():
    profiles = [p for p in load_all() if p.name == "sglang"]
    plain, named, other = (
        Conventions.merge(profiles),
        Conventions.merge(profiles, "EAGLE-3"),
        Conventions.merge(profiles, "dflash"),
    )
    assert named == plain
    assert other.setters == frozenset({"set_dflash_layers_to_capture"}) and other.setter_order == (
        "set_dflash_layers_to_capture",
    )
    assert other.digest != plain.digest
    with pytest.raises(ProfileError, match="unknown method 'medusa'"):
        Conventions.merge(profiles, "medusa")


# -- rows -----------------------------------------------------------------------------------


def test_eagle3_rows_are_the_eagle3_setters(eagle3):
    assert _support(eagle3) == {
        "IdentityForCausalLM": "supported", "OwnPlusForCausalLM": "supported", "SharedForCausalLM": "supported",
        "SharedMoeForCausalLM": "supported", "WrapVLForConditionalGeneration": "delegated",
    }
    assert all(r.chain is None or r.chain.method is None for r in eagle3.rows)


def test_dflash_rows_follow_the_dflash_setters(dflash):
    assert _support(dflash) == {
        "IdentityForCausalLM": "supported",  # identity, a finding below
        "OwnPlusForCausalLM": "delegated",  # its +1, then the inner model's DFlash setter
        "SharedForCausalLM": "supported", "SharedMoeForCausalLM": "supported",
        "WrapVLForConditionalGeneration": "broken",  # InnerTextModel has no DFlash setter
    }
    rows = {r.name: r for r in dflash.rows}
    assert rows["WrapVLForConditionalGeneration"].chain.has(ProblemKind.DELEGATE_LACKS_SETTER)
    assert rows["IdentityForCausalLM"].chain.transforms[0].transform == "identity"
    assert rows["SharedForCausalLM"].chain.transforms[0].transform == "plus_one"
    assert {r.chain.method for r in dflash.rows if r.chain is not None} == {"dflash"}


def test_method_chains_hold_every_other_method_the_class_serves(tmp_path):
    result = api.scan(FIXTURE, options=api.IndexOptions(use_cache=False, jobs=1), method="all")
    rows = {r.name: r for r in result.method_rows}
    # DSpark's runner falls back to the DFlash setter (the fixture has no DSpark setter)
    assert [c.method for c in rows["SharedForCausalLM"].method_chains] == ["dflash", "dspark"]
    assert rows["SharedForCausalLM"].chain.method is None
    # scan JSON: each model's answers under the other methods, and which methods there are
    out = tmp_path / "scan.json"
    run = CliRunner().invoke(
        main, ["scan", str(FIXTURE), "--method", "all", "--no-cache", "--format", "json", "-o", str(out)]
    )
    assert run.exit_code == 0, run.output
    doc = json.loads(out.read_text())
    assert [m["name"] for m in doc["method"]["served"]] == ["eagle3", "dflash", "dspark"]
    models = {m["class"]: m for m in doc["models"]}
    assert models["WrapVLForConditionalGeneration"]["support"] == "delegated"
    assert models["WrapVLForConditionalGeneration"]["methods"]["dflash"]["support"] == "broken"
    assert models["IdentityForCausalLM"]["methods"]["dflash"]["capture"]["id_transform"] == "identity"


def test_plain_scan_json_has_no_method_members(tmp_path):
    out = tmp_path / "scan.json"
    run = CliRunner().invoke(main, ["scan", str(FIXTURE), "--no-cache", "--format", "json", "-o", str(out)])
    assert run.exit_code == 0, run.output
    doc = json.loads(out.read_text())
    assert "method" not in doc and all("methods" not in m for m in doc["models"])


# -- traces ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "boundaries"),
    [("SharedForCausalLM", (2, 16, 29)), ("OwnPlusForCausalLM", (2, 16, 29)), ("IdentityForCausalLM", (1, 15, 28))],
)
def test_dflash_traces_on_explicit_ids(dflash, model, boundaries):
    traced = api.trace(dflash, model, [1, 15, 28], L)
    assert traced.outcome == Outcome.CAPTURES and traced.boundaries == boundaries


def test_a_delegation_to_a_model_without_the_method_raises(dflash):
    traced = api.trace(dflash, "WrapVLForConditionalGeneration", [1, 15, 28], L)
    assert traced.outcome == Outcome.RAISES
    assert traced.raises_at.line == _line(MODELS / "wrap_vl.py", "self.model.set_dflash_layers_to_capture(layer_ids)")


def test_dflash_default_ids_come_from_the_runners_function(dflash):
    # build_target_layer_ids(32, 5): start 1, span 28 -> 1 + 28 i // 4 = [1, 8, 15, 22, 29]; +1 each
    traced = api.trace(dflash, "SharedForCausalLM", None, L, draft_layers=5)
    assert traced.boundaries == (2, 9, 16, 23, 30)
    assert "build_target_layer_ids" in traced.steps[0].text
    assert traced.steps[0].location.line == _line(
        FIXTURE / "sglang" / "srt" / "speculative" / "dflash_utils.py", "def build_target_layer_ids"
    )
    assert api.trace(dflash, "SharedForCausalLM", None, L, draft_layers=1).boundaries == (17,)  # [32 // 2] + 1
    unknown = api.trace(dflash, "SharedForCausalLM", None, L)
    assert unknown.outcome == Outcome.UNKNOWN and "--draft-layers" in unknown.reason


def test_a_default_written_with_true_division_and_round_is_computed(tmp_path):
    # the engine's own spelling of build_target_layer_ids divides with / and rounds (half to even,
    # as Python rounds the float): at L = 32, 5 draft layers, 1 + 28 i / 4 = 1, 8, 15, 22, 29 exactly;
    # at 6 draft layers 1 + 28 i / 5 = 1, 6.6, 12.2, 17.8, 23.4, 29 -> 1, 7, 12, 18, 23, 29; +1 each
    import shutil

    tree = tmp_path / "tree"
    shutil.copytree(FIXTURE, tree)
    utils = tree / "sglang" / "srt" / "speculative" / "dflash_utils.py"
    text = utils.read_text()
    floor = "return [start + (i * span) // (num_draft_layers - 1) for i in range(num_draft_layers)]"
    assert floor in text
    rounded = "return [int(round(start + (i * span) / (num_draft_layers - 1))) for i in range(num_draft_layers)]"
    utils.write_text(text.replace(floor, rounded))
    result = api.scan(tree, options=api.IndexOptions(use_cache=False, jobs=1), method="dflash")
    assert api.trace(result, "SharedForCausalLM", None, L, draft_layers=5).boundaries == (2, 9, 16, 23, 30)
    assert api.trace(result, "SharedForCausalLM", None, L, draft_layers=6).boundaries == (2, 8, 13, 19, 24, 30)


def test_eagle3_traces_are_unchanged_by_the_dflash_setters(eagle3):
    assert api.trace(eagle3, "IdentityForCausalLM", [1, 15, 28], L).boundaries == (2, 16, 29)
    assert api.trace(eagle3, "SharedForCausalLM", None, L).boundaries == (2, 16, 29)  # [2, n // 2, n - 3]


def test_vllm_adds_one_to_dflash_ids_before_its_eagle3_setter():
    # vllm_like's DeepseekForCausalLM stores the ids as given and records layer idx's input:
    # boundary = id for EAGLE-3; DFlash's ids reach the setter one higher
    result = api.scan(VLLM_LIKE, options=api.IndexOptions(use_cache=False, jobs=1), method="dflash")
    traced = api.trace(result, "DeepseekForCausalLM", [1, 15, 28], L)
    assert traced.boundaries == (2, 16, 29)
    assert traced.layer_ids == (1, 15, 28)
    assert "adds 1" in traced.steps[0].text


# -- findings -------------------------------------------------------------------------------


def _findings(result) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in api.findings(result):
        out.setdefault(f.rule, []).append(f)
    return out


def test_the_delegation_and_convention_findings_run_per_method(eagle3, dflash):
    plain, per_method = _findings(eagle3), _findings(dflash)
    assert "FT003" not in plain and "FT007" not in plain  # every EAGLE-3 setter adds 1 and resolves
    (delegate,) = per_method["FT003"]
    assert (Path(delegate.file).name, delegate.line) == (
        "wrap_vl.py",
        _line(MODELS / "wrap_vl.py", "def set_dflash_layers_to_capture"),
    )
    assert (
        delegate.message.startswith("DFlash: ")
        and "InnerTextModel, which has no set_dflash_layers_to_capture()" in delegate.message
    )
    (convention,) = per_method["FT007"]
    assert (Path(convention.file).name, convention.line) == (
        "identity.py",
        _line(MODELS / "identity.py", "def set_dflash_layers_to_capture"),
    )
    # the setters that map ids themselves: shared, shared_moe and own_plus's outer one add 1
    # (own_plus's inner setter only receives mapped ids); identity.py's does not
    assert "uses identity; 3 of 4 setters in this engine use plus_one" in convention.message
    # the same place under two methods is two findings for a baseline
    assert {f.fingerprint for f in per_method["FT010"]}.isdisjoint(f.fingerprint for f in plain["FT010"])


# -- compat ---------------------------------------------------------------------------------


def _configs(tmp_path: Path, arch: str, draft: dict) -> tuple[Path, Path]:
    target, draft_path = tmp_path / "target.json", tmp_path / "draft.json"
    target.write_text(json.dumps({"architectures": [arch], "num_hidden_layers": L, "hidden_size": 64}))
    draft_path.write_text(json.dumps(draft))
    return target, draft_path


DFLASH_DRAFT = {
    "architectures": ["DFlashDraftModel"],
    "num_hidden_layers": 3,
    "hidden_size": 64,
    "dflash_config": {"target_layer_ids": [1, 15, 28]},
}


@pytest.mark.parametrize(
    ("arch", "code", "verdict"), [("SharedForCausalLM", 0, "MATCH"), ("IdentityForCausalLM", 1, "MISMATCH")]
)
def test_compat_picks_the_method_from_the_draft_and_says_which(tmp_path, arch, code, verdict):
    target, draft = _configs(tmp_path, arch, DFLASH_DRAFT)
    run = CliRunner().invoke(
        main,
        [
            "compat",
            str(FIXTURE),
            "--target-config",
            str(target),
            "--draft-config",
            str(draft),
            "--no-cache",
            "--format",
            "json",
        ],
    )
    assert run.exit_code == code, run.output
    doc = json.loads(run.stdout)
    assert doc["verdict"] == verdict and doc["method"]["label"] == "DFlash"
    assert "DFlashDraftModel" in doc["method"]["why"]
    assert doc["engine_key"] == "dflash_config.target_layer_ids"


def test_compat_picks_the_method_by_key_when_architectures_is_no_list(tmp_path):
    # "architectures": 5 names no class; the draft's dflash_config still says DFlash (choosing the
    # method iterated the number: a TypeError traceback instead of a verdict)
    target, draft = _configs(tmp_path, "SharedForCausalLM", {**DFLASH_DRAFT, "architectures": 5})
    run = CliRunner().invoke(
        main,
        ["compat", str(FIXTURE), "--target-config", str(target), "--draft-config", str(draft), "--no-cache",
         "--format", "json"],
    )
    assert run.exception is None and run.exit_code == 0, run.output
    doc = json.loads(run.stdout)
    assert doc["method"]["label"] == "DFlash" and doc["method"]["why"] == "the draft config holds dflash_config"


def test_compat_of_an_eagle3_draft_names_no_method(tmp_path):
    draft = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "num_hidden_layers": 1,
        "hidden_size": 64,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28]},
    }
    target, draft_path = _configs(tmp_path, "IdentityForCausalLM", draft)
    run = CliRunner().invoke(
        main,
        [
            "compat",
            str(FIXTURE),
            "--target-config",
            str(target),
            "--draft-config",
            str(draft_path),
            "--no-cache",
            "--format",
            "json",
        ],
    )
    assert run.exit_code == 0, run.output
    assert "method" not in json.loads(run.stdout)


def test_an_unknown_method_is_a_one_line_usage_error():
    run = CliRunner().invoke(main, ["scan", str(FIXTURE), "--method", "medusa", "--no-cache"])
    assert run.exit_code == 2
    assert (
        "unknown method 'medusa'" in run.output
        and "eagle3, dflash, dspark" in run.output
        and "Traceback" not in run.output
    )


def test_lmdeploy_fills_its_context_for_dflash_only():
    # lmdeploy_like: SpecConfig fills target_layer_ids only under method == 'dflash' (config.py),
    # which QuuxModel reads from the build context; AlphaConfigBuilder writes the config
    # attribute only for spec_method 'eagle3' (configurations/alpha.py)
    plain = api.scan(LMDEPLOY_LIKE, options=api.IndexOptions(use_cache=False, jobs=1))
    dflash = api.scan(LMDEPLOY_LIKE, options=api.IndexOptions(use_cache=False, jobs=1), method="dflash")
    assert (_support(plain)["QuuxForCausalLM"], _support(dflash)["QuuxForCausalLM"]) == ("broken", "supported")
    assert (_support(plain)["AlphaForCausalLM"], _support(dflash)["AlphaForCausalLM"]) == ("supported", "broken")
    unserved = [f for f in api.findings(dflash) if f.rule == "FT023" and "AlphaForCausalLM" in f.message]
    assert unserved and "method 'dflash'" in unserved[0].message


def test_a_config_that_is_no_draft_is_refused_in_the_asked_methods_words(tmp_path):
    # `{}` holds none of DFlash's keys (dflash_config.target_layer_ids, target_layer_ids): under
    # --method dflash the refusal names DFlash, the method compat answers for, not EAGLE-3
    target, draft = _configs(tmp_path, "SharedForCausalLM", {})
    run = CliRunner().invoke(
        main,
        [
            "compat",
            str(FIXTURE),
            "--method",
            "dflash",
            "--target-config",
            str(target),
            "--draft-config",
            str(draft),
            "--no-cache",
        ],
    )
    assert run.exit_code == 2, run.output
    assert "not a DFlash draft config" in run.output and "EAGLE-3" not in run.output


def test_compat_words_the_engine_default_as_the_runner_computes_it(tmp_path):
    # a DFlash draft naming no ids: the runner computes them with build_target_layer_ids(L, n)
    # (speculative/dflash_utils.py) before any setter runs, so without the draft's layer count
    # the engine's default is undecided; it is not the setter's raise on None ids
    # (shared.py's set_dflash_layers_to_capture raises only when handed no ids)
    draft = {"architectures": ["DFlashDraftModel"], "num_hidden_layers": 5, "hidden_size": 64, "target_hidden_size": 64}
    target, draft_path = _configs(tmp_path, "SharedForCausalLM", draft)
    run = CliRunner().invoke(
        main, ["compat", str(FIXTURE), "--target-config", str(target), "--draft-config", str(draft_path), "--no-cache"]
    )
    (default,) = [line for line in run.stdout.splitlines() if line.lstrip().startswith("default:")]
    assert "build_target_layer_ids" in default and "raises ValueError" not in default, default


# -- the DFlash training convention (rules/training/dflash.toml) ------------------------------
# A DFlash draft naming no ids was trained on build_target_layer_ids(L, N): one target layer per
# draft layer from layer 1 to L - 3, "output of layer i". For L = 32 and N = 5 draft layers that
# is ids [1, 8, 15, 22, 29] (1 + 7 i), boundaries [2, 9, 16, 23, 30].

NO_IDS_DFLASH = {"architectures": ["DFlashDraftModel"], "num_hidden_layers": 5, "hidden_size": 64,
                 "target_hidden_size": 64}


def _compat_json(tmp_path: Path, tree: Path, arch: str, draft: dict, *more: str) -> tuple[int, dict]:
    target, draft_path = _configs(tmp_path, arch, draft)
    args = ["compat", str(tree), "--target-config", str(target), "--draft-config", str(draft_path), "--no-cache",
            "--format", "json", *more]
    run = CliRunner().invoke(main, args)
    return run.exit_code, json.loads(run.stdout)


@pytest.mark.parametrize(("arch", "code", "served"), [
    # shared.py: build_target_layer_ids(32, 5) (speculative/dflash_utils.py) then the setter's +1
    ("SharedForCausalLM", 0, [2, 9, 16, 23, 30]),
    # identity.py: the DFlash setter forgets the +1
    ("IdentityForCausalLM", 1, [1, 8, 15, 22, 29]),
])
def test_compat_assumes_the_dflash_trainers_default_for_a_draft_without_ids(tmp_path, arch, code, served):
    exit_code, doc = _compat_json(tmp_path, FIXTURE, arch, NO_IDS_DFLASH)
    assert exit_code == code, doc
    assert doc["trained_with"] == "dflash" and doc["trained_boundaries"] == [2, 9, 16, 23, 30]
    assert doc["served_boundaries"] == served
    assert "N = 5, the draft's num_hidden_layers" in doc["training_default"]


def test_the_dflash_default_uses_the_target_layer_count_the_draft_records(tmp_path):
    # SpecForge writes num_target_layers: a draft trained for a 36-layer target has ids
    # [1, 9, 17, 25, 33] (boundaries + 1), whatever the target given
    draft = {**NO_IDS_DFLASH, "num_target_layers": 36}
    _, doc = _compat_json(tmp_path, FIXTURE, "SharedForCausalLM", draft)
    assert doc["trained_boundaries"] == [2, 10, 18, 26, 34]


def test_a_dflash_draft_with_neither_ids_nor_layer_count_is_refused_in_one_line(tmp_path):
    draft = {"architectures": ["DFlashDraftModel"], "hidden_size": 64, "dflash_config": {"mask_token_id": 7}}
    target, draft_path = _configs(tmp_path, "SharedForCausalLM", draft)
    args = ["compat", str(FIXTURE), "--target-config", str(target), "--draft-config", str(draft_path), "--no-cache"]
    run = CliRunner().invoke(main, args)
    assert run.exit_code == 2 and "num_hidden_layers" in run.output and "Traceback" not in run.output


def test_vllm_serves_a_dflash_draft_without_ids_the_eagle3_default(tmp_path):
    # vLLM's runner falls back to the model's EAGLE-3 default getter (interfaces.py:
    # (2, n // 2, n - 3)), three states, while the draft was trained on five; the suggested ids
    # are the draft's, one less than the setter's (the runner adds 1 to DFlash ids)
    exit_code, doc = _compat_json(tmp_path, VLLM_LIKE, "DeepseekForCausalLM", NO_IDS_DFLASH)
    assert exit_code == 1 and doc["method"]["label"] == "DFlash"
    assert (doc["trained_boundaries"], doc["served_boundaries"]) == ([2, 9, 16, 23, 30], [2, 16, 29])
    assert doc["suggestions"][0]["ids"] == [1, 8, 15, 22, 29]
    assert doc["suggestions"][0]["served_boundaries"] == [2, 9, 16, 23, 30]


# -- vLLM's other hidden-state speculators ------------------------------------------------


def test_vllm_declares_dspark_through_the_eagle3_interface_with_its_own_keys():
    vllm = next(p for p in load_all() if p.name == "vllm")
    dspark = next(m for m in vllm.methods_served if m.name == "dspark")
    # eagle3_utils.py get_eagle3_aux_layers_from_config: dflash_config's ids, then
    # dspark_target_layer_ids, then the top-level target_layer_ids, each + 1
    assert dspark.layer_id_keys == ("dflash_config.target_layer_ids", "dspark_target_layer_ids", "target_layer_ids")
    assert (dspark.id_offset, dspark.setters[0], dspark.training) == (1, "set_aux_hidden_state_layers", "dflash")


@pytest.mark.parametrize(("draft", "key"), [
    ({"architectures": ["DSparkDraftModel"], "num_hidden_layers": 5,
      "dflash_config": {"target_layer_ids": [1, 15, 28]}},
     "dflash_config.target_layer_ids"),
    ({"architectures": ["Qwen3DSparkModel"], "num_hidden_layers": 5, "dspark_target_layer_ids": [1, 15, 28]},
     "dspark_target_layer_ids"),
])
def test_compat_picks_dspark_on_vllm_and_adds_one(tmp_path, draft, key):
    # DeepseekForCausalLM stores the setter's ids and records layer idx's input: ids [1, 15, 28]
    # + 1 -> boundaries [2, 16, 29], the output of layers 1, 15 and 28
    exit_code, doc = _compat_json(tmp_path, VLLM_LIKE, "DeepseekForCausalLM", draft, "--trained-boundaries", "2,16,29")
    assert exit_code == 0, doc
    assert doc["method"]["label"] == "DSpark" and doc["engine_key"] == key and doc["served_boundaries"] == [2, 16, 29]


@pytest.mark.parametrize("arch", ["DFlashQwen3XPressModel", "LiLiCorrDraftModel"])
def test_xpress_and_lilicorr_drafts_are_served_as_dflash_on_vllm(tmp_path, arch):
    # v1/worker/gpu/spec_decode/__init__.py: both are picked under method "dflash" by architecture
    draft = {"architectures": [arch], "num_hidden_layers": 5, "dflash_config": {"target_layer_ids": [1, 15, 28]}}
    exit_code, doc = _compat_json(tmp_path, VLLM_LIKE, "DeepseekForCausalLM", draft)
    assert exit_code == 0 and doc["method"]["label"] == "DFlash" and doc["served_boundaries"] == [2, 16, 29]
    assert f"architecture {arch} is a DFlash draft class" in doc["method"]["why"]  # not only its dflash_config

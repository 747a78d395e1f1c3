"""Engines whose ids never come from a setter (lmdeploy_like, trtllm_like) and user profile files.

Every expectation below is written from the fixture modules' docstrings and code, not from
flowtrace's output.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from flowtrace import api
from flowtrace.cli.main import main
from flowtrace.engines.profiles import ProfileError, load_profile, rules_directory

from fixture_paths import LMDEPLOY_LIKE, SGLANG_LIKE, TRTLLM_LIKE

L = 32
LMD = "lmdeploy/pytorch"
TRT = "tensorrt_llm/_torch"


@pytest.fixture(scope="module")
def lmd():
    return api.scan(LMDEPLOY_LIKE, options=api.IndexOptions(jobs=1, use_cache=False))


@pytest.fixture(scope="module")
def trt():
    return api.scan(TRTLLM_LIKE, options=api.IndexOptions(jobs=1, use_cache=False))


def where(loc) -> str:
    return f"{loc.file}:{loc.line}"


# -- lmdeploy_like: registry, id sources, builders ---------------------------------------------------
def test_update_calls_with_fstring_values_register_classes(lmd):
    registered = {r.name: r.architectures for r in lmd.rows if r.registered}
    for name in (
        "AlphaForCausalLM",
        "KappaForCausalLM",
        "QuuxForCausalLM",
        "ZetaForCausalLM",
        "EtaForCausalLM",
        "OmegaForCausalLM",
        "SigmaForCausalLM",
        "AlphaRawForCausalLM",
        "Eagle3AlphaForCausalLM",
    ):
        assert registered[name] == (name,)
    assert [p.name for p in lmd.profiles] == ["lmdeploy"]


@pytest.mark.parametrize(
    "model, kind, read_at, outcome, decided_at",
    [
        ("AlphaForCausalLM", "config", f"{LMD}/models/alpha.py:28", "captures", f"{LMD}/configurations/alpha.py:19"),
        ("KappaForCausalLM", "config", f"{LMD}/models/kappa.py:49", "captures", f"{LMD}/configurations/kappa.py:19"),
        ("EtaForCausalLM", "config", f"{LMD}/models/alpha.py:28", "captures_nothing", f"{LMD}/models/alpha.py:28"),
        ("QuuxForCausalLM", "context", f"{LMD}/models/quux.py:24", "captures_nothing", f"{LMD}/config.py:19"),
        ("ZetaForCausalLM", "context", f"{LMD}/models/quux.py:24", "refuses", f"{LMD}/configurations/zeta.py:16"),
        # super().build(spec_method=None): the base's assert does not apply; selector in a helper
        ("OmegaForCausalLM", "config", f"{LMD}/models/alpha.py:28", "captures", f"{LMD}/configurations/omega.py:34"),
        # super().build(spec_method=spec_method): the base refuses
        ("SigmaForCausalLM", "config", f"{LMD}/models/alpha.py:28", "refuses", f"{LMD}/configurations/zeta.py:16"),
    ],
)
def test_id_source_and_outcome(lmd, model, kind, read_at, outcome, decided_at):
    row = lmd.model(model)
    chain = row.chain
    assert row.capture is None and chain is not None and not chain.setter_driven
    stated = chain.production.decision
    assert (chain.source.word, where(chain.source.location), stated.outcome, where(stated.location)) == (
        kind,
        read_at,
        outcome,
        decided_at,
    )
    assert chain.production.id_transform == "ignored"
    # never call a class working when EAGLE-3 captures nothing or is refused
    assert row.support == ("supported" if outcome == "captures" else "broken")


def test_capture_shapes(lmd):
    alpha, kappa, quux = (lmd.model(m).chain for m in ("AlphaForCausalLM", "KappaForCausalLM", "QuuxForCausalLM"))
    assert (alpha.site.mechanism, alpha.site.point, alpha.concat.order, where(alpha.site.location)) == (
        "append",
        "input",
        "loop",
        f"{LMD}/models/alpha.py:36",
    )
    assert (kappa.site.mechanism, kappa.site.point, kappa.concat.order) == ("dict_store", "input", "config")
    (store,) = (d for ff in lmd.files if ff.sources is not None for d in ff.sources.dict_captures)
    assert (where(kappa.site.location), where(kappa.concat.location), store.layer_keyword) == (
        f"{LMD}/models/kappa.py:60",
        f"{LMD}/models/kappa.py:62",
        "capture_input",
    )
    assert (quux.site.mechanism, quux.site.point) == ("append", "output")


@pytest.mark.parametrize("ids", [None, [-1, 2, 30], [0, 1]])
def test_config_layout_ignores_the_drafts_ids(lmd, ids):
    traced = api.trace(lmd, "AlphaForCausalLM", ids, L)
    assert traced.boundaries == (2, 16, 29)  # (2, n // 2, n - 3), captured before layer i
    assert "ignored" in traced.steps[0].text


@pytest.mark.parametrize(
    "model, layers, expected",
    [
        ("AlphaForCausalLM", 4, (1, 2)),  # (2, 2, 1): membership test, loop order, duplicate collapses
        ("KappaForCausalLM", 32, (30, 3, 16)),  # (n - 2, 3, n // 2) in config order
        ("KappaForCausalLM", 6, (4, 3, 3)),  # the duplicate id repeats its slot
    ],
)
def test_loop_order_and_config_order(lmd, model, layers, expected):
    assert api.trace(lmd, model, None, layers).boundaries == expected


def test_first_index_with_a_none_residual(lmd):
    """L = 3: the layout is (2, 1, 0). Alpha guards the add (b=0 captured); AlphaRaw adds None."""
    assert api.trace(lmd, "AlphaForCausalLM", None, 3).boundaries == (0, 1, 2)
    raw = api.trace(lmd, "AlphaRawForCausalLM", None, 3)
    assert raw.outcome == "raises" and where(raw.raises_at) == f"{LMD}/models/alpha.py:78"
    assert api.trace(lmd, "AlphaRawForCausalLM", None, L).boundaries == (2, 16, 29)


def test_builder_reached_through_super(lmd):
    assert api.trace(lmd, "OmegaForCausalLM", [-1, 2, 30], L).boundaries == (1, 2)


def test_config_order_unknown_id_raises(lmd):
    traced = api.trace(lmd, "KappaForCausalLM", None, 3)  # (1, 3, 1): no layer 3, by_layer[3] is missing
    assert traced.boundaries is None
    assert any("KeyError" in p for p in traced.problems)


@pytest.mark.parametrize(
    "model, words",
    [("QuuxForCausalLM", "dflash"), ("ZetaForCausalLM", "refused"), ("EtaForCausalLM", "no config builder writes")],
)
def test_nothing_captured_is_a_failed_trace(lmd, model, words):
    traced = api.trace(lmd, model, [-1, 2, 30], L)
    assert traced.boundaries is None and any(words in p for p in traced.problems)


def test_drafts_in_scan_json(lmd):
    from flowtrace.render.scan_json import scan_document

    doc = scan_document(lmd, [])
    drafts = {d["class"].rsplit(".", 1)[-1]: d for d in doc["drafts"]}
    assert drafts["Eagle3AlphaModel"]["fc_in_features"] == "target_hidden_size * 3"
    assert drafts["Eagle3AlphaModel"]["reads_ids"] == []
    assert drafts["Eagle3KappaModel"]["fc_in_features"] == "self.target_hidden_size * len(self.aux_layer_ids)"
    assert [(r["key"], r["line"]) for r in drafts["Eagle3KappaModel"]["reads_ids"]] == [
        ("eagle_aux_hidden_state_layer_ids", 11)
    ]
    alpha = next(m for m in doc["models"] if m["class"] == "AlphaForCausalLM")
    assert (
        alpha["id_source"]["id_transform"] == "ignored"
        and alpha["id_source"]["decided_at"] == f"{LMD}/configurations/alpha.py:19"
    )


def test_kappa_fixture_runs_as_stated():
    """The fixture is real torch code: config order, repeated duplicates, KeyError on an unknown id."""
    torch = pytest.importorskip("torch")
    import importlib
    import sys
    from types import SimpleNamespace

    sys.path.insert(0, str(LMDEPLOY_LIKE))
    try:
        kappa = importlib.import_module("lmdeploy.pytorch.models.kappa")
    finally:
        sys.path.remove(str(LMDEPLOY_LIKE))
    torch.manual_seed(0)
    model = kappa.KappaModel(SimpleNamespace(hidden_size=4, num_hidden_layers=6, aux_hidden_state_layers=(4, 3, 3)))
    out = model(torch.randn(2, 4))["aux_hidden_states"]
    assert out.shape == (2, 12) and torch.equal(out[:, 4:8], out[:, 8:12])
    broken = kappa.KappaModel(SimpleNamespace(hidden_size=4, num_hidden_layers=3, aux_hidden_state_layers=(1, 3, 1)))
    with pytest.raises(KeyError):
        broken(torch.randn(2, 4))


# -- trtllm_like -------------------------------------------------------------------------------------
def test_hook_rows(trt):
    alpha, beta = trt.model("AlphaForCausalLM"), trt.model("BetaForCausalLM")
    assert alpha.registered and alpha.architectures == ("AlphaForCausalLM",)
    assert (alpha.support, alpha.chain.site.point, where(alpha.chain.site.location)) == (
        "supported",
        "output",
        f"{TRT}/models/modeling_alpha.py:38",
    )
    assert where(alpha.chain.production.default.location) == f"{TRT}/speculative/metadata.py:34"
    assert beta.support == "broken" and beta.chain.production.decision.outcome == "captures_nothing"
    assert "uninitialised" in beta.chain.production.decision.reason


def test_hook_trace_defaults_and_sorting(trt):
    assert api.trace(trt, "AlphaForCausalLM", None, L).boundaries == (2, 16, 29)  # (1, 15, 28) + 1
    traced = api.trace(trt, "AlphaForCausalLM", [30, -1, 2], L, 4096)
    assert traced.boundaries == (3, 31)
    assert [i for i, _ in traced.dropped] == [-1] and "post-final-norm" in traced.dropped[0][1]
    assert "3 x 4096" in traced.steps[-1].text  # two boundaries plus the post-norm slot
    post = next(s for s in traced.steps if s.kind == "dropped")
    assert where(post.location) == f"{TRT}/models/modeling_speculative.py:25"


def test_hook_default_raises_for_small_models(trt):
    traced = api.trace(trt, "AlphaForCausalLM", None, 5)
    assert traced.boundaries is None and any("not enough layers" in p for p in traced.problems)


# -- compat of a SpecForge-style draft ---------------------------------------------------------------
def _configs(tmp_path: Path) -> tuple[Path, Path]:
    target = tmp_path / "target.json"
    target.write_text(json.dumps({"architectures": ["AlphaForCausalLM"], "num_hidden_layers": 32, "hidden_size": 4096}))
    draft = tmp_path / "draft.json"
    draft.write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLMEagle3"],
                "target_hidden_size": 4096,
                "eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 2, 30]},
            }
        )
    )
    return target, draft


def test_compat_config_engine_serves_its_own_layout(lmd, tmp_path):
    target, draft = _configs(tmp_path)
    result = api.compat(lmd, target, draft)
    assert result.verdict == "MISMATCH" and result.trained == (0, 3, 31) and result.served == (2, 16, 29)
    assert result.engine_ids is None  # nobody reads the draft's ids
    assert any("ignored" in n and f"{LMD}/configurations/alpha.py:19" in n for n in result.notes)


def test_compat_hook_engine_names_the_serving_setting(trt, tmp_path):
    target, draft = _configs(tmp_path)
    result = api.compat(trt, target, draft)
    assert result.verdict == "MISMATCH" and result.served == (2, 16, 29)
    assert any("eagle3_layers_to_capture = {2, 30}" in n for n in result.notes)
    assert any("b=0" in n and "cannot be requested" in n for n in result.notes)


# -- user profiles -----------------------------------------------------------------------------------
def run(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_bundled_profile_as_a_user_file_keeps_working(tmp_path):
    """Profile keys only grow: today's sglang.toml, copied as a user file, still loads and scans."""
    copy = tmp_path / "sglang.toml"
    copy.write_text((rules_directory() / "engines" / "sglang.toml").read_text())
    res = run("scan", SGLANG_LIKE, "--profile-file", copy, "--no-cache", "--jobs", "1")
    assert res.exit_code == 0, res.output
    assert "AlphaForCausalLM" in res.output


def test_minimal_profile_needs_only_a_name(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text('[engine]\nname = "tiny"\n')
    profile = load_profile(path)
    assert (profile.name, profile.setters, profile.layers_attribute) == ("tiny", (), "layers")


CATASTROPHIC = "(a+)+$"
BAD_USER_PROFILES = {
    "not-toml": ('[engine\nname = "x"\n', "not valid TOML"),
    "wrong-type": ('[engine]\nname = "x"\n[capture]\nattributes = "aux"\n', "[capture] attributes must be a list"),
    "wrong-item": (
        '[engine]\nname = "x"\n[metadata_hook]\nhooks = [1]\n',
        "[metadata_hook] hooks: expected a list of strings",
    ),
    "bool-for-int": (
        '[engine]\nname = "x"\n[metadata_hook]\npost_norm_id = true\n',
        "[metadata_hook] post_norm_id must be a int",
    ),
    "unknown-key": (
        '[engine]\nname = "x"\n[config_capture]\nconfig_key = []\n',
        "[config_capture] has unknown key(s) config_key",
    ),
    "unknown-table": ('[engine]\nname = "x"\n[captures]\n', "unknown table(s) [captures]"),
    "backtracking-regex": (
        f'[engine]\nname = "x"\n[registry]\ndict_files = ["r.py"]\ndict_name_pattern = "{CATASTROPHIC}"\n',
        "[registry] dict_name_pattern: nested repetition",
    ),
    "bad-name": ('[engine]\nname = "a b/c"\n', "[engine] name must be"),
}


@pytest.mark.parametrize("case", sorted(BAD_USER_PROFILES))
@pytest.mark.parametrize("command", ["scan", "trace", "check", "graph"])
def test_bad_user_profile_is_one_line_exit_2(tmp_path, case, command):
    text, words = BAD_USER_PROFILES[case]
    path = tmp_path / f"{case}.toml"
    path.write_text(text)
    extra = ("-m", "AlphaForCausalLM", "-L", "32") if command == "trace" else ()
    res = run(command, SGLANG_LIKE, *extra, "--profile-file", path, "--no-cache", "--jobs", "1")
    assert res.exit_code == 2, res.output
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("flowtrace: error:"), res.output
    assert str(path) in lines[0] and words in lines[0]
    assert "Traceback" not in res.output


def test_huge_profile_is_refused_before_parsing(tmp_path):
    path = tmp_path / "huge.toml"
    path.write_text('[engine]\nname = "x"\n' + "# padding\n" * 40_000)
    with pytest.raises(ProfileError, match="more than the"):
        load_profile(path)


def test_profile_files_in_pyproject(tmp_path):
    """[tool.flowtrace] profile-files, relative to the pyproject, used by `check`."""
    import shutil

    tree = tmp_path / "tree"
    shutil.copytree(LMDEPLOY_LIKE, tree)
    own = (rules_directory() / "engines" / "lmdeploy.toml").read_text().replace('name = "lmdeploy"', 'name = "mine"')
    (tree / "ci").mkdir()
    (tree / "ci" / "mine.toml").write_text(own)
    (tree / "pyproject.toml").write_text('[tool.flowtrace]\nprofile-files = ["ci/mine.toml"]\nprofile = "mine"\n')
    res = run("check", tree, "--no-cache", "--jobs", "1", "--output-format", "json")
    assert res.exit_code in (0, 1), res.output
    (tree / "pyproject.toml").write_text('[tool.flowtrace]\nprofile-files = ["ci/missing.toml"]\n')
    res = run("check", tree, "--no-cache", "--jobs", "1")
    assert res.exit_code == 2 and "missing.toml" in res.output


def test_the_documented_example_profile_scans_as_documented(tmp_path):
    """docs/profiles.md's worked example, written out of the page itself (so the two cannot drift)."""
    doc = (Path(__file__).parents[1] / "docs" / "profiles.md").read_text()
    example = doc[doc.index("## Worked example"):]
    blocks = re.findall(r"```(?:toml|python)\n(.*?)```", example, re.S)
    assert len(blocks) == 4
    for body in blocks:
        name = body.splitlines()[0].lstrip("# ").strip()
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
    profile = tmp_path / "quill.toml"
    res = run(
        "trace",
        tmp_path,
        "--profile-file",
        profile,
        "-m",
        "FinchForCausalLM",
        "-L",
        "32",
        "--layer-ids",
        "-1,2,30",
        "--format",
        "json",
        "--no-cache",
        "--jobs",
        "1",
    )
    assert res.exit_code == 0, res.output
    traced = json.loads(res.output)
    # (1, n // 2, n - 2) appended after layer i: b = i + 1, whatever the draft's ids
    assert traced["boundaries"] == [2, 17, 31]
    assert any(s["file"] == "quill/configs/finch.py" for s in traced["steps"])
    out = tmp_path / "scan.json"
    scan = run("scan", tmp_path, "--profile-file", profile, "--format", "json", "-o", out, "--no-cache", "--jobs", "1")
    assert scan.exit_code == 0, scan.output
    row = next(m for m in json.loads(out.read_text())["models"] if m["class"] == "FinchForCausalLM")
    assert (
        row["registered"],
        row["support"],
        row["id_source"]["id_transform"],
        row["id_source"]["capture_site"]["point"],
    ) == (True, "supported", "ignored", "output")


def _import_from(root: Path, module: str):
    import importlib
    import sys

    sys.path.insert(0, str(root))
    try:
        return importlib.import_module(module)
    finally:
        sys.path.remove(str(root))


def test_alpha_fixture_runs_with_its_builder():
    """Running the builder then the model: slot k is the stream entering layer ids[k] (b = id)."""
    torch = pytest.importorskip("torch")
    from types import SimpleNamespace

    builder = _import_from(LMDEPLOY_LIKE, "lmdeploy.pytorch.configurations.alpha")
    alpha = _import_from(LMDEPLOY_LIKE, "lmdeploy.pytorch.models.alpha")
    hf = SimpleNamespace(architectures=["AlphaForCausalLM"], num_hidden_layers=8, hidden_size=4)
    builder.AlphaConfigBuilder.build(hf, spec_method="eagle3")
    assert hf.aux_hidden_state_layers == (2, 4, 5)
    torch.manual_seed(0)
    model = alpha.AlphaModel(hf)
    x = torch.randn(3, 4)
    aux = model(x)["aux_hidden_states"]
    h, r, streams = x, None, {0: x}
    for i, layer in enumerate(model.layers):
        h, r = layer(h, r)
        streams[i + 1] = h + r
    assert torch.allclose(aux, torch.cat([streams[2], streams[4], streams[5]], dim=-1))
    unset = SimpleNamespace(architectures=["AlphaForCausalLM"], num_hidden_layers=8, hidden_size=4)
    builder.AlphaConfigBuilder.build(unset, spec_method="dflash")
    assert not hasattr(unset, "aux_hidden_state_layers")  # other methods: nothing is written


def test_trtllm_fixture_runs_as_stated():
    """Alpha fills slots with layer outputs in ascending id order; Beta never writes its slots."""
    torch = pytest.importorskip("torch")
    meta_mod = _import_from(TRTLLM_LIKE, "tensorrt_llm._torch.speculative.metadata")
    alpha = _import_from(TRTLLM_LIKE, "tensorrt_llm._torch.models.modeling_alpha")
    beta = _import_from(TRTLLM_LIKE, "tensorrt_llm._torch.models.modeling_beta")
    meta = meta_mod.OneModelSpecMetadata(num_layers=8, layers_to_capture={5, 1}, hidden_size=4, max_num_tokens=3)
    assert meta.layers_to_capture == [1, 5]
    torch.manual_seed(0)
    model = alpha.AlphaForCausalLM(hidden=4, num_layers=8)
    x = torch.randn(3, 4)
    model(x, spec_metadata=meta)
    h, r, outputs = x, None, {}
    for i, layer in enumerate(model.model.layers):
        h, r = layer(h, r)
        outputs[i] = r  # after layer i: the residual sum it hands on = mlp output + residual
    assert torch.allclose(meta.hidden_states, torch.cat([outputs[1], outputs[5]], dim=-1))
    empty = meta_mod.OneModelSpecMetadata(num_layers=8, hidden_size=4, max_num_tokens=3)
    empty.hidden_states.fill_(7.0)
    beta.BetaForCausalLM(hidden=4, num_layers=8)(x, spec_metadata=empty)
    assert bool((empty.hidden_states == 7.0).all())  # nothing was written, and nothing raised


def test_compat_suggestions_for_setterless_rows(lmd, trt, tmp_path):
    """Hook engine: serving-config ids b - 1, verified by a trace; config engine: no ids can."""
    target, draft = _configs(tmp_path)
    hook = api.compat(trt, target, draft, trained_boundaries=[3, 16, 31])
    (s,) = hook.suggestions
    assert (s.ids, s.key, s.served, s.config) == (
        (2, 15, 30),
        "eagle3_layers_to_capture",
        (3, 16, 31),
        "serving config",
    )
    blocked = api.compat(trt, target, draft).suggestions  # trained on b=0: not requestable
    assert all(b.ids is None or 0 not in (b.served or ()) for b in blocked)
    (fixed,) = api.compat(lmd, target, draft, trained_boundaries=[3, 16, 31]).suggestions
    assert (
        fixed.ids is None
        and fixed.blocked_by == "id source"
        and str(fixed.location) == f"{LMD}/configurations/alpha.py:19"
    )

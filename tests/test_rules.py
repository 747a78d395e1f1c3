"""Every rule fires where its fixture says and nowhere else."""

from __future__ import annotations

from collections import Counter

import pytest

from flowtrace import api
from flowtrace.checks.base import all_rules

# What the fixture engines deliberately contain (see each fixture file's docstring).
EXPECTED_SGLANG = {
    ("FT001", "sglang/srt/models/omega_vl.py"),  # SigmaVL wraps Gamma, no setter
    ("FT002", "sglang/srt/models/epsilon.py"),  # EpsilonModel loop, no setter
    ("FT003", "sglang/srt/models/iota_vl.py"),  # delegates to PlainForCausalLM, which has no setter
    ("FT005", "sglang/srt/models/lambda_model.py"),  # forward override drops AlphaModel's capture
    ("FT006", "sglang/srt/models/mu.py"),  # flag read by forward, never set by the setter
    ("FT004", "sglang/srt/models/epsilon.py"),  # Zeta setter, ZetaModel has no loop
    ("FT007", "sglang/srt/models/beta.py"),  # identity where most setters add one
    ("FT007", "sglang/srt/models/gamma.py"),  # conditional where most setters add one
    ("FT008", "sglang/srt/models/beta.py"),  # shifted default
    ("FT009", "sglang/srt/models/beta.py"),  # output point: embedding unreachable
    ("FT009", "sglang/srt/models/gamma.py"),  # conditional: -1 falls to identity
    ("FT009", "sglang/srt/models/omega_vl.py"),  # same, through delegation
    ("FT009", "sglang/srt/models/kappa_moe.py"),  # output point
    ("FT010", "sglang/srt/models/alpha.py"),  # input point: b=L unreachable
    ("FT010", "sglang/srt/models/gamma.py"),
    ("FT010", "sglang/srt/models/kappa_moe.py"),  # plus one then output: L-1 -> index L, outside the loop
    ("FT011", "sglang/srt/models/kappa_moe.py"),  # self.layers[layer_id]
    ("FT012", "sglang/srt/models/alpha.py"),  # forward_split_prefill
    ("FT013", "sglang/srt/models/beta.py"),  # hidden_states without residual
    ("FT013", "sglang/srt/models/theta.py"),  # stored reference updated in place (residual += ...)
    ("FT010", "sglang/srt/models/theta.py"),  # input point
    ("FT014", "sglang/srt/speculative/eagle3_draft.py"),  # two readers, two defaults
    ("FT009", "sglang/srt/models/nu.py"),  # index 0 adds a None residual: the embedding raises
    ("FT009", "sglang/srt/models/omicron_vl.py"),  # both wrappers reach nu.py's loop
    ("FT009", "sglang/srt/models/xi.py"),  # identity: -1 dropped; the unguarded twin raises at 0
    ("FT010", "sglang/srt/models/xi.py"),  # input point, nothing after the loop
    ("FT009", "sglang/srt/models/rho.py"),  # identity: -1 dropped
    ("FT010", "sglang/srt/models/rho.py"),  # input point, nothing after the loop
    ("FT007", "sglang/srt/models/nu.py"),  # identity where most setters add one
    ("FT009", "sglang/srt/models/psi_factory.py"),  # output point (PsiModel, Beta through the injected class)
    ("FT010", "sglang/srt/models/psi_factory.py"),  # plus one then output: L-1 -> index L
    ("FT009", "sglang/srt/models/phi_dict.py"),  # output point: the embedding is never recorded
    ("FT010", "sglang/srt/models/phi_dict.py"),  # plus one then output: L-1 -> index L, outside the loop
    ("FT007", "sglang/srt/models/xi.py"),
    ("FT007", "sglang/srt/models/rho.py"),
}
EXPECTED_VLLM = {
    ("FT009", "vllm/model_executor/models/interfaces.py"),  # identity: -1 dropped
    ("FT009", "vllm/model_executor/models/deepseek.py"),
    ("FT017", "vllm/model_executor/models/registry.py"),  # registry entry without a class
}


def test_fixture_engines_give_the_expected_findings_and_nothing_else(sglang_scan, vllm_scan):
    assert {(f.rule, f.file) for f in api.findings(sglang_scan)} == EXPECTED_SGLANG
    assert {(f.rule, f.file) for f in api.findings(vllm_scan)} == EXPECTED_VLLM


def test_each_finding_names_the_classes_involved(sglang_scan):
    by_rule = {f.rule: f for f in api.findings(sglang_scan)}
    assert "SigmaVLForConditionalGeneration" in by_rule["FT001"].message and "GammaForCausalLM" in by_rule["FT001"].message
    assert "ZetaModel" in by_rule["FT004"].message
    assert "[1, 2, 3, 4]" in by_rule["FT014"].message


def test_inconsistent_transform_reports_the_outliers_with_the_majority(tmp_path):
    import shutil

    from flowtrace.index.build import IndexOptions

    from fixture_paths import SGLANG_LIKE

    root = tmp_path / "engine"
    shutil.copytree(SGLANG_LIKE, root)
    models = root / "sglang/srt/models"
    for name in ("one", "two", "three"):
        text = (models / "alpha.py").read_text().replace("Alpha", name.capitalize())
        (models / f"{name}.py").write_text(text)
    findings = [f for f in api.findings(api.scan(root, options=IndexOptions(use_cache=False, jobs=1))) if f.rule == "FT007"]
    files = sorted(f.file for f in findings)
    assert files == ["sglang/srt/models/beta.py", "sglang/srt/models/gamma.py", "sglang/srt/models/nu.py", "sglang/srt/models/rho.py", "sglang/srt/models/xi.py"]  # the identity and conditional setters
    assert all("use plus_one" in f.message for f in findings)


def test_fingerprints_are_stable_and_line_independent(sglang_scan, tmp_path):
    import shutil

    from flowtrace.index.build import IndexOptions

    from fixture_paths import SGLANG_LIKE

    root = tmp_path / "engine"
    shutil.copytree(SGLANG_LIKE, root)
    beta = root / "sglang/srt/models/beta.py"
    beta.write_text("# a new first line moves every line down\n" + beta.read_text())
    moved = api.findings(api.scan(root, options=IndexOptions(use_cache=False, jobs=1)))
    original = api.findings(sglang_scan)
    assert {f.fingerprint for f in moved} == {f.fingerprint for f in original}
    assert len({f.fingerprint for f in original}) == len(original)


def test_rule_metadata_is_complete():
    rules = all_rules()
    codes = [r.code for r in rules]
    assert len(codes) == len(set(codes)) and len(codes) >= 15
    for rule in rules:
        assert rule.severity in {"error", "warning", "info"}
        assert rule.name == rule.name.lower() and " " not in rule.name
        assert rule.summary and rule.rationale and rule.fix
        assert rule.valid and rule.invalid, f"{rule.code} needs examples"


@pytest.mark.parametrize("rule_code", sorted(c for c, _ in Counter(code for code, _ in EXPECTED_SGLANG | EXPECTED_VLLM).items()))
def test_selection_runs_only_the_selected_rule(sglang_scan, vllm_scan, rule_code):
    for scan in (sglang_scan, vllm_scan):
        assert {f.rule for f in api.findings(scan, select=(rule_code,))} <= {rule_code}

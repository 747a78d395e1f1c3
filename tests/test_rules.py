"""Every rule fires where its fixture says and nowhere else."""

from __future__ import annotations

from collections import Counter

import pytest

from flowtrace import api
from flowtrace.checks.base import all_rules

# What the fixture engines deliberately contain (see each fixture file's docstring):
# (rule, file, class the finding is about, line that decides it).
M = "sglang/srt/models/"
EXPECTED_SGLANG = {
    ("FT001", M + "omega_vl.py", "SigmaVLForConditionalGeneration", 22),  # wraps Gamma, no setter (class line)
    ("FT002", M + "epsilon.py", "EpsilonModel", 23),  # capture loop, no setter (the append)
    ("FT022", M + "epsilon.py", "EpsilonModel", 23),  # ...and it appends h + residual with residual = None (line 19)
    # delegates to PlainForCausalLM, which has no setter
    ("FT003", M + "iota_vl.py", "IotaVLForConditionalGeneration", 12),
    ("FT005", M + "lambda_model.py", "LambdaModel", 10),  # forward override drops AlphaModel's capture (its loop)
    ("FT006", M + "mu.py", "MuForCausalLM", 20),  # flag read by forward, never set by the setter
    ("FT004", M + "epsilon.py", "ZetaForCausalLM", 51),  # Zeta setter, ZetaModel has no loop
    ("FT007", M + "beta.py", "BetaForCausalLM", 37),  # identity where most setters add one
    ("FT007", M + "gamma.py", "GammaForCausalLM", 53),  # conditional where most setters add one
    # default [2, n//2, n-3] handed on plus-one to a loop recording after layer i: b one later than siblings
    # (beta's textually shifted default [1, n//2-1, n-4] with an output point reaches the siblings' boundaries)
    ("FT008", M + "kappa_moe.py", "KappaMoeForCausalLM", 57),
    # FT009 on beta (output point: embedding unreachable), gamma (conditional: -1 falls to identity,
    # also through omega_vl's delegation) and kappa_moe (output point) sits on the same setter as
    # FT007 / FT008: one cause, one finding (the FT007 / FT008 one, "same cause as FT009").
    # One finding per place for every class sharing it ("also affects ..."): alpha.py's append
    # serves Alpha, Digamma, Mu and PsiBase; gamma.py's callback serves Gamma and OmegaVL.
    ("FT010", M + "alpha.py", "AlphaForCausalLM", 32),  # input point: b=L unreachable (the append)
    ("FT010", M + "gamma.py", "GammaForCausalLM", 40),  # the callback handed to layer i
    ("FT010", M + "kappa_moe.py", "KappaMoeForCausalLM", 47),  # plus one then output: L-1 -> index L, outside the loop
    ("FT011", M + "kappa_moe.py", "KappaModel", 34),  # self.layers[layer_id]
    # alpha.py's forward_split_prefill runs without capture but is no speculative entry point: no FT012
    ("FT013", M + "beta.py", "BetaModel", 28),  # hidden_states without residual
    ("FT013", M + "theta.py", "ThetaModel", 23),  # stored reference updated in place (residual += ...)
    ("FT010", M + "theta.py", "ThetaForCausalLM", 23),  # input point
    ("FT014", "sglang/srt/speculative/eagle3_draft.py", "aux_count", 14),  # two readers, two defaults
    # nu.py, xi.py, rho.py (core's stream fixtures): identity setters among plus-one siblings
    ("FT007", M + "nu.py", "NuForCausalLM", 50),
    ("FT007", M + "xi.py", "XiForCausalLM", 55),
    ("FT007", M + "rho.py", "RhoForCausalLM", 42),
    # nu.py: the local `stream = hidden_states + residual` appended at 32 while residual = None (27)
    ("FT022", M + "nu.py", "NuModel", 32),
    # xi.py: XiUnguardedModel appends `carry + hidden_states` with carry = None (38)
    ("FT022", M + "xi.py", "XiUnguardedModel", 42),
    # identity: -1 is never a loop index (nu and XiUnguarded raise at index 0 instead: FT022, no FT009);
    # for xi and rho that FT009 is folded into the FT007 finding on the same setter
    # input-point loops without a post-loop capture (nu.py records b = L after its loop)
    ("FT010", M + "xi.py", "XiForCausalLM", 29),
    ("FT010", M + "xi.py", "XiUnguardedForCausalLM", 42),
    ("FT010", M + "rho.py", "RhoForCausalLM", 28),
    # phi_dict.py: dict by layer stored after layer i (output point) behind a plus-one setter: the
    # embedding is never recorded (one finding for the shared setter at 52) and id L-1 -> index L
    # is outside the loop (each model's store: Phi at 31, Chi at 41)
    # phi_dict.py's setter (52) is also where HetaVL's and PsiVL's embedding gap is decided (they
    # hand the ids to it): one FT009 there naming all three; one FT010 at Phi's store for Phi,
    # HetaVL and PsiVL
    ("FT009", M + "phi_dict.py", "HetaVLForConditionalGeneration", 52),
    ("FT010", M + "phi_dict.py", "HetaVLForConditionalGeneration", 31),
    ("FT010", M + "phi_dict.py", "ChiForCausalLM", 41),
    # psi_factory.py (holders by construction): PsiBase keeps AlphaModel (input point: no b=L,
    # reported at alpha.py's append); Psi/PsiExt get PsiModel (plus one, recorded after layer i:
    # no embedding, no b=L; one finding for both at the shared site); PsiVL hands Phi in
    # (phi_dict.py: output point, same two gaps).
    ("FT010", M + "psi_factory.py", "PsiExtForCausalLM", 37),
    ("FT009", M + "psi_factory.py", "PsiExtForCausalLM", 58),
    # heta_vl.py: HetaVL rebinds its base's language model to Phi (phi_dict.py: plus one, output
    # point): no embedding and no b=L, both reported where Phi decides them (52 and 31, above).
    # HetaBase keeps Nu (identity; index 0 raises: Nu's own FT022, no new finding).
    # digamma.py / koppa.py (return path): the states are captured and dropped before the runner
    ("FT020", M + "digamma.py", "DigammaForCausalLM", 17),  # forward keeps out[0] of AlphaModel's output
    ("FT020", M + "koppa.py", "KoppaModel", 26),  # returns without them when `not self.return_aux_hidden_states`
    ("FT010", M + "koppa.py", "KoppaForCausalLM", 23),  # input point: b=L unreachable (the append)
}
EXPECTED_VLLM = {
    # vLLM ids are boundaries (profile embedding_id = 0): the identity setters reach b=0 with id 0 by
    # design, so interfaces.py and deepseek.py are no longer FT009 findings.
    # registry entry without a class
    ("FT017", "vllm/model_executor/models/registry.py", "MissingForConditionalGeneration", 17),
    # dual/: the registry names a package whose __init__ picks main.py's or alt.py's classes
    # at import time (both variants are analysed; which one serves depends on the platform)
    ("FT017", "vllm/model_executor/models/registry.py", "DualForCausalLM", 7),
    ("FT017", "vllm/model_executor/models/registry.py", "DualVLForConditionalGeneration", 20),
}


def class_of(symbol: str | None) -> str:
    """The class a finding's symbol names (``pkg.mod.Cls.method`` -> ``Cls``); else its last part."""
    parts = (symbol or "").split(".")
    classes = [p for p in parts if p[:1].isupper()]
    return classes[-1] if classes else parts[-1]


def _keyed(findings) -> set[tuple[str, str, str, int]]:
    return {(f.rule, f.file, class_of(f.symbol), f.line) for f in findings}


def test_fixture_engines_give_the_expected_findings_and_nothing_else(sglang_scan, vllm_scan):
    assert _keyed(api.findings(sglang_scan)) == EXPECTED_SGLANG
    assert _keyed(api.findings(vllm_scan)) == EXPECTED_VLLM


def test_every_finding_has_a_typed_problem_kind(sglang_scan, vllm_scan):
    from flowtrace.model.facts import ProblemKind

    for f in api.findings(sglang_scan) + api.findings(vllm_scan):
        assert isinstance(f.kind, ProblemKind), f


def test_each_finding_names_the_classes_involved(sglang_scan):
    by_rule = {f.rule: f for f in api.findings(sglang_scan)}
    assert (
        "SigmaVLForConditionalGeneration" in by_rule["FT001"].message and "GammaForCausalLM" in by_rule["FT001"].message
    )
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
    findings = [
        f for f in api.findings(api.scan(root, options=IndexOptions(use_cache=False, jobs=1))) if f.rule == "FT007"
    ]
    files = sorted(f.file for f in findings)
    # beta (identity), gamma (conditional) and the identity setters of nu, rho and xi
    assert files == [
        "sglang/srt/models/beta.py",
        "sglang/srt/models/gamma.py",
        "sglang/srt/models/nu.py",
        "sglang/srt/models/rho.py",
        "sglang/srt/models/xi.py",
    ]
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


@pytest.mark.parametrize("rule_code", sorted(Counter(e[0] for e in EXPECTED_SGLANG | EXPECTED_VLLM)))
def test_selection_runs_only_the_selected_rule(sglang_scan, vllm_scan, rule_code):
    for scan in (sglang_scan, vllm_scan):
        assert {f.rule for f in api.findings(scan, select=(rule_code,))} <= {rule_code}

"""Each rule fires on its firing fixture and stays silent on its non-firing one.

The fixture engines under tests/fixtures/rules/rules_sglang and rules_vllm were written for
these rules (one module per case; each module's docstring says what must and must not fire).
Expected findings name the class the finding is about and the line that decides it, read
from the fixture files. FT010 (an informational property of every input-point loop) is left
out of the comparison so each case stays about its own rule.
"""

from __future__ import annotations

import json

import pytest

from flowtrace import api
from flowtrace.index.build import IndexOptions
from flowtrace.model.facts import ProblemKind
from flowtrace.render.html import build_context
from flowtrace.render.scan_json import scan_document

from fixture_paths import RULE_FIXTURES
from test_rules import class_of

M = "sglang/srt/models/"
V = "vllm/model_executor/models/"

EXPECTED_SGLANG = {
    # eta.py: identity setter among plus-one siblings; -1 (SGLang's embedding id) is dropped: one
    # cause on one setter, so FT009 is folded into FT007's finding (the worse consequence: a draft
    # in the engine's convention silently gets b=i instead of i+1)
    ("FT007", M + "eta.py", "EtaForCausalLM", 56, ProblemKind.TRANSFORM_INCONSISTENT),
    # psi.py: the entry that makes PsiModel reachable; PsiModel records after layer i, so with
    # its plus-one setter no id reaches the embedding (a capability note, info)
    ("FT009", M + "psi.py", "PsiForCausalLM", 46, ProblemKind.EMBEDDING_UNREACHABLE),
    # omicron.py: the default path gets the plus one too: b one later than the siblings' defaults
    ("FT008", M + "omicron.py", "OmicronForCausalLM", 55, ProblemKind.DEFAULT_BOUNDARIES_SHIFTED),
    # lambda_path.py: forward's fast branch runs the layers without the capture (its loop)
    ("FT012", M + "lambda_path.py", "LambdaPathModel", 17, ProblemKind.CAPTURE_SKIPPED_ON_PATH),
    # lambda_helper.py: forward calls self._fast, whose loop (line 26) runs without the capture;
    # forward_split_prefill (line 31) is reached from no entry point
    ("FT012", M + "lambda_helper.py", "LambdaHelperModel", 26, ProblemKind.CAPTURE_SKIPPED_ON_PATH),
    # phi.py: `hidden_states + residual` before layer i with residual = None (line 15)
    ("FT022", M + "phi.py", "PhiModel", 19, ProblemKind.INDEX0_RAISES),
    # pi_vl.py: PiVL lacks both the setter and get_embed_and_head (the class line)
    ("FT001", M + "pi_vl.py", "PiVLForConditionalGeneration", 15, ProblemKind.WRAPPER_WITHOUT_SETTER),
    # pi_vl.py: the wrapped model whose holder has no capture loop (its setter)
    ("FT004", M + "pi_vl.py", "BrokenInnerForCausalLM", 60, ProblemKind.NO_CAPTURE_SITE),
    # pi_vl.py: PiBrokenVL lacks the setter (refused, the class line) around that model
    ("FT001", M + "pi_vl.py", "PiBrokenVLForConditionalGeneration", 64, ProblemKind.WRAPPER_WITHOUT_SETTER),
    # psi.py: the delta captured alone, layers do not fold the residual
    ("FT013", M + "psi.py", "PsiModel", 24, ProblemKind.RESIDUAL_MISSING),
    # rho.py: flag + unpack, no setter, no capture loop (the flag test in forward)
    ("FT019", M + "rho.py", "RhoForCausalLM", 25, ProblemKind.FLAG_WITHOUT_CAPTURE),
    # sigma.py: SigmaModel's loop set only by the DFlash setter; TauModel's loop by nothing
    ("FT018", M + "sigma.py", "SigmaModel", 18, ProblemKind.CAPTURE_FED_BY_OTHER_FAMILY),
    ("FT002", M + "sigma.py", "TauModel", 52, ProblemKind.CAPTURE_WITHOUT_SETTER),
    # upsilon.py: `return hidden_states, extra` on every non-idle batch, before the aux return
    ("FT020", M + "upsilon.py", "UpsilonModel", 25, ProblemKind.RETURN_DROPPED),
}

EXPECTED_VLLM = {
    # bar.py: declares SupportsEagle3; language_model.model is BarTextModel, no EagleModelMixin
    ("FT021", V + "bar.py", "BarForConditionalGeneration", 22, ProblemKind.INTERFACE_HOLDER_CANNOT_CAPTURE),
    # dee.py: `hidden_states + residual` before layer idx with residual = None on the first rank
    ("FT022", V + "dee.py", "DeeModel", 20, ProblemKind.INDEX0_RAISES),
    # registry.py: "vllm.models.gone" names no module of the tree (line 7)
    ("FT017", V + "registry.py", "GoneForCausalLM", 7, ProblemKind.REGISTRY_TARGET_MISSING),
}


def _scan(name: str):
    return api.scan(RULE_FIXTURES / name, options=IndexOptions(use_cache=False, jobs=1))


@pytest.fixture(scope="module")
def rules_sglang():
    return _scan("rules_sglang")


@pytest.fixture(scope="module")
def rules_vllm():
    return _scan("rules_vllm")


def _keyed(findings):
    return {(f.rule, f.file, class_of(f.symbol), f.line, f.kind) for f in findings if f.rule != "FT010"}


def test_rule_fixtures_sglang(rules_sglang):
    assert _keyed(api.findings(rules_sglang)) == EXPECTED_SGLANG


def test_rule_fixtures_vllm(rules_vllm):
    assert _keyed(api.findings(rules_vllm)) == EXPECTED_VLLM


def test_non_firing_cases_name_nothing(rules_sglang):
    """The classes written to stay silent appear in no finding (read from the fixture docstrings)."""
    silent = {
        "NuForCausalLM", "NuModel", "XiForCausalLM", "PiForCausalLM", "PiVLGoodForConditionalGeneration",
        "PiForCausalLMMTP", "PiDiffusionForBlockDiffusion",
        "GuardedPhiModel", "ChiModel", "SigmaForCausalLM",
    }
    named = {class_of(f.symbol) for f in api.findings(rules_sglang) if f.rule != "FT010"}
    assert not named & silent


def test_ft001_names_every_method_the_engine_requires(rules_sglang):
    (f,) = [
        f
        for f in api.findings(rules_sglang)
        if f.rule == "FT001" and class_of(f.symbol) == "PiVLForConditionalGeneration"
    ]
    assert "set_eagle3_layers_to_capture()" in f.message and "get_embed_and_head()" in f.message
    assert "set_eagle3_layers_to_capture()" in f.hint and "get_embed_and_head()" in f.hint


def test_ft001_on_a_wrapper_of_a_model_that_never_captures(rules_sglang):
    """pi_vl.py: PiBrokenVL is refused (no setter), and the setter alone would not help:
    BrokenInnerModel.forward (line 52) returns without reading layers_to_capture. An info
    refusal that names that forward, with the wrapped classes (lines 56, 47) as related places
    so the report shows it on their rows; the fix does not stop at "add the setter"."""
    (f,) = [
        f
        for f in api.findings(rules_sglang)
        if f.rule == "FT001" and class_of(f.symbol) == "PiBrokenVLForConditionalGeneration"
    ]
    assert (f.line, f.severity, f.consequence.value) == (64, "info", "refused_startup")
    assert "BrokenInnerModel.forward (sglang/srt/models/pi_vl.py:52) never captures" in f.message
    assert "would not help" in f.message
    assert {(r.file, r.line) for r in f.related} == {(M + "pi_vl.py", 56), (M + "pi_vl.py", 47)}
    assert f.hint.startswith("First make BrokenInnerModel.forward")


def test_the_report_shows_that_refusal_on_the_wrapped_models_rows(rules_sglang):
    """BrokenInnerForCausalLM (the setter's class; BrokenInnerModel has no setter, so no row
    in this engine) is a broken row; the HTML report lists the wrapper's FT001 on it, through
    the finding's related places, beside its own FT004."""
    doc = json.loads(json.dumps(scan_document(rules_sglang, api.findings(rules_sglang))))
    rows = {m.qualname.rsplit(".", 1)[-1]: m for m in build_context(doc)["models"]}
    assert rows["BrokenInnerForCausalLM"].support == "broken"
    assert {("FT001", 64), ("FT004", 60)} <= {(f.rule, f.line) for f in rows["BrokenInnerForCausalLM"].findings}
    assert not [f for f in rows["PiForCausalLM"].findings if f.rule == "FT001"]


def test_ft017_module_path_is_not_prefixed_twice(rules_vllm):
    (f,) = [f for f in api.findings(rules_vllm) if f.rule == "FT017"]
    assert "vllm.models.gone.GoneForCausalLM" in f.message
    assert "models.vllm." not in f.message
    # the absolute entry that exists resolves: no finding for ZedForCausalLM
    assert not [g for g in api.findings(rules_vllm) if "Zed" in (g.symbol or "")]


def test_ft009_is_silent_where_id_0_is_the_embedding(rules_vllm):
    """vLLM's identity setters reach b=0 with id 0, the engine's embedding id: no FT009."""
    assert not [f for f in api.findings(rules_vllm) if f.rule == "FT009"]


def test_ft022_reports_the_engines_own_embedding_id(rules_sglang, rules_vllm):
    (sg,) = [f for f in api.findings(rules_sglang) if f.rule == "FT022"]
    (vl,) = [f for f in api.findings(rules_vllm) if f.rule == "FT022"]
    assert "(id -1)" in sg.message and "(id 0)" in vl.message

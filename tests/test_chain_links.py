"""The capture chain's links on fixtures written for each pattern (issue 11).

Every expectation below comes from reading the fixture's code and its docstring, never
from flowtrace's output: nu.py / xi.py (stream semantics at index 0), omicron_vl.py
(defaults through delegation, hasattr branches), rho.py (a fixed-slot collector).
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from flowtrace import api
from flowtrace.cli.main import main
from flowtrace.model import facts as F

from fixture_paths import SGLANG_LIKE

L = 32


def test_status_words_are_strings_in_json():
    assert json.dumps({"o": F.Outcome.RAISES, "t": F.Transform.PLUS_ONE}) == '{"o": "raises", "t": "plus_one"}'
    assert f"{F.Support.CONDITIONAL}" == "conditional" and F.Point.INPUT == "input"


# -- stream semantics ---------------------------------------------------------------


def test_unguarded_none_residual_raises_at_index_0(sglang_scan):
    c = sglang_scan.project.row("NuForCausalLM").capture
    assert c.point == F.INPUT
    assert c.embedding_capturable is False  # recording b=0 raises
    assert c.last_layer_capturable is True  # `if self.end_layer in ...` after the loop
    assert c.stream.raising_index == 0 and F.ProblemKind.INDEX0_RAISES in c.kinds()
    assert c.stream.raises_at.file.endswith("models/nu.py") and c.stream.raises_at.line == 31  # `stream = hidden_states + residual`
    assert sglang_scan.project.row("NuForCausalLM").support == "supported"  # it works for other ids
    traced = api.trace(sglang_scan, "NuForCausalLM", [0, 2, 30], L)
    assert traced.outcome == F.Outcome.RAISES and traced.boundaries is None
    assert str(traced.raises_at).endswith("models/nu.py:31")
    assert "residual" in traced.reason and "None" in traced.reason


def test_none_residual_is_fine_when_index_0_is_not_requested(sglang_scan):
    traced = api.trace(sglang_scan, "NuForCausalLM", [2, 30, 32], L)
    assert traced.outcome == F.Outcome.CAPTURES
    assert traced.boundaries == (2, 30, 32)  # b=32 recorded after the loop


def test_mutated_reference_fills_every_slot_with_the_final_state(sglang_scan):
    """theta.py: ``aux_hidden_states.append(residual)`` (line 23) stores a reference, then
    ``residual += delta`` (line 25) updates that one tensor in place and the loop never
    rebinds ``residual``: every slot holds its state after the last layer, b=L."""
    c = sglang_scan.project.row("ThetaForCausalLM").capture
    assert c.stream.kind == F.StreamKind.MUTATED_REFERENCE and c.stream.final_state
    assert c.stream.mutation == "residual += delta" and str(c.stream.mutated_at).endswith("models/theta.py:25")
    traced = api.trace(sglang_scan, "ThetaForCausalLM", [-1, 3, 4], L)  # plus one: indices 0, 4, 5
    assert traced.outcome == F.Outcome.CAPTURES and traced.boundaries == (L, L, L)
    assert "theta.py:25" in traced.reason
    assert api.trace(sglang_scan, "ThetaForCausalLM", [1, 99], L).boundaries == (L,)  # 100 is never met


def test_a_rebound_name_is_not_one_tensor_across_iterations():
    """``x`` rebound by ``=`` in the loop is a fresh tensor per iteration; ``+=`` alone is not."""
    import libcst as cst

    from flowtrace.index.streams import rebinds

    def loop(src: str) -> cst.For:
        return cst.parse_module(src).body[0]

    assert rebinds(loop("for i in r:\n    a.append(x)\n    x += d\n    x = f(x)\n"), "x")
    assert not rebinds(loop("for i in r:\n    a.append(x)\n    x += d\n    y = f(x)\n"), "x")
    assert rebinds(loop("for i in r:\n    if c:\n        h, x = f(h, x)\n"), "x")


def test_guarded_site_captures_the_embedding(sglang_scan):
    c = sglang_scan.project.row("XiForCausalLM").capture
    assert c.embedding_capturable is True and c.stream.raising_index is None
    assert api.trace(sglang_scan, "XiForCausalLM", [0, 2], L).boundaries == (0, 2)


def test_none_operand_is_followed_by_value_not_by_name(sglang_scan):
    c = sglang_scan.project.row("XiUnguardedForCausalLM").capture
    assert c.stream.raising_index == 0 and c.embedding_capturable is False
    assert api.trace(sglang_scan, "XiUnguardedForCausalLM", [0, 2], L).outcome == F.Outcome.RAISES
    assert api.trace(sglang_scan, "XiUnguardedForCausalLM", [1, 2], L).boundaries == (1, 2)


# -- defaults through delegation, hasattr branches -------------------------------------------


def test_default_flows_through_delegation(sglang_scan):
    traced = api.trace(sglang_scan, "OmicronVLForConditionalGeneration", None, L)
    assert traced.outcome == F.Outcome.CAPTURES
    assert traced.capture_indices == (2, 16, 29) and traced.boundaries == (2, 16, 29)


def test_setter_with_locals_and_hasattr_branch_writes_the_attribute(sglang_scan):
    traced = api.trace(sglang_scan, "PiVLForConditionalGeneration", [1, 2, 30], L)
    assert traced.capture_indices == (2, 3, 31) and traced.boundaries == (2, 3, 31)
    # ids with -1 become index 0, whose record adds a None residual (nu.py's loop)
    assert api.trace(sglang_scan, "PiVLForConditionalGeneration", [-1, 2, 30], L).outcome == F.Outcome.RAISES
    assert api.trace(sglang_scan, "PiVLForConditionalGeneration", None, L).capture_indices == (2, 16, 29)


def test_every_branch_is_shown_with_its_line_and_no_double_negative(sglang_scan):
    traced = api.trace(sglang_scan, "OmicronVLForConditionalGeneration", [1, 2], L)
    branches = [s for s in traced.steps if s.kind == "branch"]
    # omicron_vl.py:25 `if self.language_model is None or not hasattr(...)`, nu.py:52 `if layer_ids is None`
    assert [(s.location.file.rsplit("/", 1)[-1], s.location.line) for s in branches] == [("omicron_vl.py", 25), ("nu.py", 52)]
    assert "hasattr(self.language_model, 'set_eagle3_layers_to_capture') is True" in branches[0].text
    assert "not hasattr" not in branches[0].text.split(":", 2)[-1]
    pi = api.trace(sglang_scan, "PiVLForConditionalGeneration", [1, 2], L)
    lines = [s.location.line for s in pi.steps if s.kind == "branch"]
    assert lines == [39, 44]  # `if layer_ids is None`, `if hasattr(self.model, ...)`


# -- fixed-slot collectors ---------------------------------------------------------------------


def test_fixed_slot_collector_raises_on_count_mismatch(sglang_scan):
    c = sglang_scan.project.row("RhoForCausalLM").capture
    assert c.slots is not None and c.slots.collector.endswith("slots.SlotBuffer")
    assert c.slots.sized_by == "len(self.layers_to_capture)" and c.slots.check_at.line == 17
    traced = api.trace(sglang_scan, "RhoForCausalLM", [-1, 2, 30], L)
    assert traced.outcome == F.Outcome.RAISES
    assert str(traced.raises_at).endswith("models/rho.py:32")  # `aux.finalize()`
    assert api.trace(sglang_scan, "RhoForCausalLM", [1, 2, 30], L).boundaries == (1, 2, 30)


# -- the command line ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "model, ids, outcome, code",
    [
        ("RhoForCausalLM", "-1,2,30", "raises", 1),
        ("RhoForCausalLM", "1,2,30", "captures", 0),
        ("NuForCausalLM", "0,2", "raises", 1),
        ("PlainForCausalLM", "1", "raises", 1),  # the runner calls the setter unguarded (model_runner.py:16)
    ],
)
def test_trace_json_outcome_and_exit_code(model, ids, outcome, code):
    out = CliRunner().invoke(main, ["trace", str(SGLANG_LIKE), "-m", model, "--layer-ids", ids, "-L", "32", "--format", "json", "--no-cache"])
    assert out.exit_code == code, out.output
    doc = json.loads(out.stdout)
    assert doc["schema"] == "flowtrace.trace/1" and doc["outcome"] == outcome
    assert (doc["raises_at"] is not None) == (outcome == "raises")
    assert (doc["reason"] is None) == (outcome == "captures")
    for key in ("model", "num_layers", "layer_ids", "capture_indices", "boundaries", "dropped", "steps", "problems", "fc_in_features"):
        assert key in doc


# -- structural recognition --------------------------------------------------------------------


def test_helper_not_named_in_the_profile_is_found_by_shape(sglang_scan):
    helpers = {h.method: h for ff in sglang_scan.project.files for h in ff.helper_defs}
    keep = helpers["_keep"]
    assert (keep.label_arg, keep.container_arg, keep.attribute, keep.guarded) == (1, 0, "layers_to_capture", True)
    c = sglang_scan.project.row("TauForCausalLM").capture
    assert c.site.mechanism == F.HELPER and c.site.helper_method == "_keep"
    assert (c.point, c.embedding_capturable, c.last_layer_capturable) == (F.INPUT, True, True)
    assert api.trace(sglang_scan, "TauForCausalLM", [-1, 1, 31], L).boundaries == (0, 2, 32)


def test_alias_of_the_attribute_and_capture_handed_to_the_final_norm(sglang_scan):
    c = sglang_scan.project.row("UpsilonForCausalLM").capture
    assert c.site.attribute == "layers_to_capture" and c.point == F.INPUT
    assert c.last_layer_capturable is True and c.site.post_loop_at.line == 81  # the norm call
    assert c.stream.kind == F.StreamKind.RESIDUAL_STREAM  # the layer folds the residual in
    assert api.trace(sglang_scan, "UpsilonForCausalLM", [-1, 1, 31], L).boundaries == (0, 2, 32)


def test_dict_by_layer_read_in_config_or_loop_order(sglang_scan):
    phi = sglang_scan.project.row("PhiForCausalLM").capture
    chi = sglang_scan.project.row("ChiForCausalLM").capture
    assert phi.site.mechanism == F.Mechanism.DICT and phi.point == F.OUTPUT
    assert (phi.concat_order, chi.concat_order) == (F.ConcatOrder.CONFIG, F.ConcatOrder.LOOP)
    assert api.trace(sglang_scan, "PhiForCausalLM", [5, -1, 2], L).boundaries == (7, 1, 4)
    assert api.trace(sglang_scan, "ChiForCausalLM", [5, -1, 2], L).boundaries == (1, 4, 7)


# -- holders ---------------------------------------------------------------------------------------


def test_language_model_built_from_the_target_config_is_conditional(vllm_scan):
    row = vllm_scan.project.row("LlavaLikeForConditionalGeneration")
    assert row.support == "conditional"
    assert row.capture.depends_on == "text_config.architectures" and row.capture.holder_kind == F.HolderKind.DYNAMIC
    unresolved = api.trace(vllm_scan, row.name, [0, 2, 32], L)
    assert unresolved.outcome == F.Outcome.UNKNOWN and "text_config.architectures" in unresolved.reason
    config = {"architectures": [row.name], "text_config": {"architectures": ["LlamaForCausalLM"]}}
    resolved = api.trace(vllm_scan, row.name, [0, 2, 32], L, target_config=config)
    # llama.py: identity ids, helper labels the stream after layer idx as idx + 1, plus the embedding
    assert resolved.outcome == F.Outcome.CAPTURES and resolved.boundaries == (0, 2, 32)
    absent = api.trace(vllm_scan, row.name, [0], L, target_config={"text_config": {"architectures": ["LlamaEmbeddingModel"]}})
    assert absent.outcome == F.Outcome.CAPTURES_NOTHING


def test_language_model_stored_by_an_annotated_assignment_is_followed(vllm_scan):
    # annotated_vl.py: `self.language_model: LlamaForCausalLM = build_by_architecture(...,
    # architectures=["LlamaForCausalLM"])`; the interface setter reaches language_model.model
    row = vllm_scan.project.row("AnnotatedVLForConditionalGeneration")
    assert row.support == "delegated" and row.capture.holder.endswith("llama.LlamaModel")
    # llama.py: identity ids, the embedding before the loop, idx + 1 after layer idx
    assert api.trace(vllm_scan, row.name, [0, 2, 32], L).boundaries == (0, 2, 32)
    assert api.trace(vllm_scan, row.name, None, L).boundaries == (2, 16, 29)


@pytest.mark.parametrize("variant", ["main", "alt"])
def test_registry_package_re_exporting_platform_variants(vllm_scan, variant):
    # dual/__init__.py re-exports main.py's or alt.py's classes (wrapper and language model from
    # the same branch); the registry names the package. Each variant's wrapper builds its own
    # variant's DualForCausalLM, whose model is Llama's loop (identity, idx + 1, embedding 0).
    wrapper = f"vllm.model_executor.models.dual.{variant}.DualVLForConditionalGeneration"
    row = vllm_scan.project.row(wrapper)
    assert row.registered and "DualVLForConditionalGeneration" in row.architectures
    assert row.support == "delegated"
    assert row.capture.holder == f"vllm.model_executor.models.dual.{variant}.DualModel"
    assert api.trace(vllm_scan, wrapper, [0, 2, 32], L).boundaries == (0, 2, 32)
    assert api.trace(vllm_scan, wrapper, None, L).boundaries == (2, 16, 29)


@pytest.mark.parametrize(
    "model, holder, delegates_to, point",
    [
        ("PsiBaseForCausalLM", "alpha.AlphaModel", None, F.INPUT),  # the base's own factory
        ("PsiForCausalLM", "psi_factory.PsiModel", None, F.OUTPUT),  # overriding factory method
        ("PsiExtForCausalLM", "psi_factory.PsiExtModel", None, F.OUTPUT),  # forward extends super().forward
        ("PsiVLBaseForConditionalGeneration", "nu.NuModel", "nu.NuForCausalLM", F.INPUT),
        ("PsiVLForConditionalGeneration", "phi_dict.PhiModel", "phi_dict.PhiForCausalLM", F.OUTPUT),  # class handed to super().__init__
    ],
)
def test_holder_through_construction_forms(sglang_scan, model, holder, delegates_to, point):
    c = sglang_scan.project.row(model).capture
    assert c.holder == f"sglang.srt.models.{holder}"
    assert c.delegates_to == (f"sglang.srt.models.{delegates_to}" if delegates_to else None)
    assert c.point == point


# -- capture sites found by shape -----------------------------------------------------


def _shapes_scan():
    from pathlib import Path

    from flowtrace.index.build import IndexOptions

    return api.scan(Path(__file__).parent / "probe" / "agreement_engines" / "shapes", options=IndexOptions(use_cache=False, jobs=1))


def test_metadata_hook_handed_to_the_layers_is_a_capture_site():
    """metadata_hook.py: the model builds ``HookSpecMetadata(self.layers_to_capture)`` (line 40),
    hands it to every layer as ``spec_metadata=`` (line 42), and the layer calls its recording
    method after ``self.mlp`` (line 29) with ``hidden_states + residual`` summed there: the
    layer's output, so identity ids i give b=i+1 and -1 never matches."""
    scan = _shapes_scan()
    c = scan.project.row("HookForCausalLM").capture
    assert c.site.mechanism == F.Mechanism.HOOK and c.site.callback_parameter == "spec_metadata"
    assert c.site.container_class.endswith("metadata_hook.HookSpecMetadata") and c.site.location.line == 42
    assert c.point == F.OUTPUT and [str(e) for e in c.point_evidence] == ["sglang/srt/models/metadata_hook.py:29"]
    assert api.trace(scan, "HookForCausalLM", None, 8).boundaries == (3, 5, 6)  # default (2, n//2, n-3)
    assert api.trace(scan, "HookForCausalLM", [-1, 3, 4], 8).boundaries == (4, 5)


def test_layers_that_fold_the_residual_record_the_stream():
    """folded_residual.py: each layer returns ``(residual + mlp(h), residual)`` (lines 19-20),
    the loop records the first value alone after layer i (line 33): the stream, not a delta;
    and the guarded / unguarded index-0 sums are told apart in the same tree (none_residual.py
    raises at index 0, helper_method.py's guarded sum does not)."""
    scan = _shapes_scan()
    folded = scan.project.row("FoldedForCausalLM").capture
    assert folded.stream.kind == F.StreamKind.RESIDUAL_STREAM and folded.site.split_residual
    assert api.trace(scan, "FoldedForCausalLM", [-1, 3, 4], 8).boundaries == (4, 5)  # index 0 is never met
    none = scan.project.row("NoneResidualForCausalLM").capture
    assert none.stream.raising_index == 0 and str(none.stream.raises_at).endswith("none_residual.py:18")
    helper = scan.project.row("HelperForCausalLM").capture
    assert helper.stream.raising_index is None and helper.embedding_capturable

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
    # `stream = hidden_states + residual`
    assert c.stream.raises_at.file.endswith("models/nu.py") and c.stream.raises_at.line == 31
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


@pytest.mark.parametrize("edit, kind, boundaries", [
    # rebound before the in-place update: `+=` changes the new tensor, the stored one stays b=i
    ("residual = residual * 1\n            residual += delta", F.StreamKind.RESIDUAL_STREAM, (1, 4, 5)),
    # rebound after it: each slot holds its own iteration's `residual + delta`, not a boundary
    ("residual += delta\n            residual = residual * 1", F.StreamKind.MUTATED_REFERENCE, None),
])
def test_a_rebinding_decides_what_the_stored_reference_holds(tmp_path, edit, kind, boundaries):
    """theta.py with one line changed around its `residual += delta` (line 25)."""
    import shutil

    from flowtrace.index.build import IndexOptions

    tree = tmp_path / "sglang_like"
    shutil.copytree(SGLANG_LIKE, tree)
    theta = tree / "sglang" / "srt" / "models" / "theta.py"
    text = theta.read_text()
    assert text.count("            residual += delta") == 1
    theta.write_text(text.replace("residual += delta", edit))
    scan = api.scan(tree, options=IndexOptions(use_cache=False, jobs=1))
    c = scan.project.row("ThetaForCausalLM").capture
    assert c.stream.kind == kind and not c.stream.final_state
    traced = api.trace(scan, "ThetaForCausalLM", [0, 3, 4], L)  # plus one: indices 1, 4, 5 (input point)
    assert traced.boundaries == boundaries
    if boundaries is None:
        assert traced.outcome == F.Outcome.UNKNOWN and "rebinds" in traced.reason


def test_a_rebound_name_is_not_one_tensor_across_iterations():
    """``x`` rebound by ``=`` in the loop is a fresh tensor per iteration; ``+=`` alone is not."""
    import ast

    from flowtrace.index.streams import rebinds

    def loop(src: str) -> ast.For:
        return ast.parse(src).body[0]

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


def test_wrapper_rebinding_its_bases_language_model_is_followed(sglang_scan):
    # heta_vl.py: the base builds NuForCausalLM (identity, before layer i); the subclass runs
    # super().__init__ and rebinds language_model to PhiForCausalLM (plus one, after layer i,
    # config order), so the inherited delegating setter reaches Phi's setter.
    sub = sglang_scan.project.row("HetaVLForConditionalGeneration").capture
    base = sglang_scan.project.row("HetaBaseVLForConditionalGeneration").capture
    assert sub.holder == "sglang.srt.models.phi_dict.PhiModel"
    assert base.holder == "sglang.srt.models.nu.NuModel"
    assert api.trace(sglang_scan, "HetaVLForConditionalGeneration", [5, -1, 2], L).boundaries == (7, 1, 4)
    # Nu: identity, -1 matches no layer, loop order
    assert api.trace(sglang_scan, "HetaBaseVLForConditionalGeneration", [5, -1, 2], L).boundaries == (2, 5)


def test_every_branch_is_shown_with_its_line_and_no_double_negative(sglang_scan):
    traced = api.trace(sglang_scan, "OmicronVLForConditionalGeneration", [1, 2], L)
    branches = [s for s in traced.steps if s.kind == "branch"]
    # omicron_vl.py:25 `if self.language_model is None or not hasattr(...)`, nu.py:52 `if layer_ids is None`
    assert [(s.location.file.rsplit("/", 1)[-1], s.location.line) for s in branches] == [
        ("omicron_vl.py", 25),
        ("nu.py", 52),
    ]
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
    out = CliRunner().invoke(
        main, ["trace", str(SGLANG_LIKE), "-m", model, "--layer-ids", ids, "-L", "32", "--format", "json", "--no-cache"]
    )
    assert out.exit_code == code, out.output
    doc = json.loads(out.stdout)
    assert doc["schema"] == "flowtrace.trace/1" and doc["outcome"] == outcome
    assert (doc["raises_at"] is not None) == (outcome == "raises")
    assert (doc["reason"] is None) == (outcome == "captures")
    for key in (
        "model",
        "num_layers",
        "layer_ids",
        "capture_indices",
        "boundaries",
        "dropped",
        "steps",
        "problems",
        "fc_in_features",
    ):
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
    absent = api.trace(
        vllm_scan, row.name, [0], L, target_config={"text_config": {"architectures": ["LlamaEmbeddingModel"]}}
    )
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
        # class handed to super().__init__
        ("PsiVLForConditionalGeneration", "phi_dict.PhiModel", "phi_dict.PhiForCausalLM", F.OUTPUT),
    ],
)
def test_holder_through_construction_forms(sglang_scan, model, holder, delegates_to, point):
    c = sglang_scan.project.row(model).capture
    assert c.holder == f"sglang.srt.models.{holder}"
    assert c.delegates_to == (f"sglang.srt.models.{delegates_to}" if delegates_to else None)
    assert c.point == point


# -- setter evaluation outcomes (issue 11 item 3) --------------------------------------------------


def test_inner_setter_indexing_every_layer_raises_for_an_id_past_the_stack(sglang_scan):
    """kappa_moe.py: the outer setter adds one and hands the ids on; the inner one stores them
    and runs `setattr(self.layers[layer_id], ...)` for each (line 37), unguarded."""
    traced = api.trace(sglang_scan, "KappaMoeForCausalLM", [1, 3, 40], L)  # 40 + 1 = 41 > 32 layers
    assert traced.outcome == F.Outcome.RAISES and traced.boundaries is None
    assert str(traced.raises_at).endswith("models/kappa_moe.py:37") and "IndexError" in traced.reason
    in_range = api.trace(sglang_scan, "KappaMoeForCausalLM", [-2, 3, 30], L)  # -2 + 1 = -1: Python wraps it
    assert in_range.outcome == F.Outcome.CAPTURES and in_range.boundaries == (5, 32)  # output point: index i -> b=i+1


@pytest.mark.parametrize("ids", [None, [1, 2, 30]])
def test_delegation_to_a_class_without_the_setter_raises_at_the_call(sglang_scan, ids):
    """iota_vl.py:13 calls self.language_model.set_eagle3_layers_to_capture(layer_ids); the
    language model is a PlainForCausalLM (plain.py), which defines no such method."""
    traced = api.trace(sglang_scan, "IotaVLForConditionalGeneration", ids, L)
    assert traced.outcome == F.Outcome.RAISES
    assert str(traced.raises_at).endswith("models/iota_vl.py:13") and "AttributeError" in traced.reason


# -- the return path (link 6) ---------------------------------------------------------------------


def test_flag_the_setter_never_sets_drops_the_states(sglang_scan):
    """mu.py: __init__ sets capture_aux_hidden_states = False (line 12), the setter never turns it
    on, and with it off forward returns `out[0] if isinstance(out, tuple) else out` (line 18)."""
    c = sglang_scan.project.row("MuForCausalLM").capture
    assert c.returns.kind == F.ReturnKind.FLAG_NEVER_SET and c.returns.decided and not c.returns.raises
    assert str(c.returns.location).endswith("models/mu.py:18") and c.returns.flag == "capture_aux_hidden_states"
    assert [str(e).rsplit("/", 1)[-1] for e in c.returns.evidence] == ["mu.py:12"]
    assert F.ProblemKind.RETURN_DROPPED in c.kinds() and sglang_scan.project.row("MuForCausalLM").support == "broken"
    traced = api.trace(sglang_scan, "MuForCausalLM", [1, 2, 30], L)
    assert traced.outcome == F.Outcome.CAPTURES_NOTHING and traced.boundaries == ()
    assert "capture_aux_hidden_states" in traced.reason and "mu.py:18" in traced.reason


def test_the_flag_the_setter_sets_hands_the_states_on(sglang_scan):
    """alpha.py: the setter sets the flag (line 62); forward unpacks `hidden_states, aux = out` (55)
    from AlphaModel, whose forward returns (hidden_states, aux_hidden_states) (36)."""
    c = sglang_scan.project.row("AlphaForCausalLM").capture
    assert c.returns.kind == F.ReturnKind.RETURNED and str(c.returns.location).endswith("models/alpha.py:55")


def test_inherited_unpacking_of_an_override_that_returns_one_value_raises(sglang_scan):
    """lambda_model.py: LambdaForCausalLM inherits AlphaForCausalLM's setter (flag on) and forward,
    which unpacks `hidden_states, aux = out` (alpha.py:55); its model is LambdaModel, whose forward
    overrides AlphaModel's capturing one and returns `hidden_states` alone (lambda_model.py:12)."""
    c = sglang_scan.project.row("LambdaForCausalLM").capture
    assert c.returns.kind == F.ReturnKind.OVERRIDDEN and c.returns.raises
    assert str(c.returns.location).endswith("models/alpha.py:55")
    assert [str(e).rsplit("/", 1)[-1] for e in c.returns.evidence] == ["lambda_model.py:12"]
    for ids in (None, [1, 2, 30]):
        traced = api.trace(sglang_scan, "LambdaForCausalLM", ids, L)
        assert traced.outcome == F.Outcome.RAISES and str(traced.raises_at).endswith("models/alpha.py:55")
        assert "ValueError" in traced.reason


def test_wrapper_that_never_unpacks_drops_the_states(sglang_scan):
    """digamma.py: the setter turns capture on (flag and ids, lines 19-25), but forward returns
    `out[0] if isinstance(out, tuple) else out` of AlphaModel's (hidden, aux) (line 17)."""
    row = sglang_scan.project.row("DigammaForCausalLM")
    assert row.capture.returns.kind == F.ReturnKind.NOT_UNPACKED and row.capture.returns.decided
    assert str(row.capture.returns.location).endswith("models/digamma.py:17") and row.support == "broken"
    for ids in (None, [1, 2, 30]):
        traced = api.trace(sglang_scan, "DigammaForCausalLM", ids, L)
        assert traced.outcome == F.Outcome.CAPTURES_NOTHING and traced.boundaries == ()
        assert "digamma.py:17" in traced.reason


def test_early_return_under_a_flag_nothing_sets_drops_the_states(sglang_scan):
    """koppa.py: KoppaModel.forward captures in its loop (line 23), then returns
    `hidden_states` alone when `not self.return_aux_hidden_states` (25-26); the flag is False
    from __init__ (16) and neither the setter nor another method assigns it. The wrapper hands
    the output on as it is (35), so nothing raises."""
    row = sglang_scan.project.row("KoppaForCausalLM")
    link = row.capture.returns
    assert link.kind == F.ReturnKind.EARLY_RETURN and link.decided and not link.raises
    assert str(link.location).endswith("models/koppa.py:26")
    assert [str(e).rsplit("/", 1)[-1] for e in link.evidence] == ["koppa.py:23", "koppa.py:16"]
    traced = api.trace(sglang_scan, "KoppaForCausalLM", [1, 2, 30], L)
    assert traced.outcome == F.Outcome.CAPTURES_NOTHING and "return_aux_hidden_states" in traced.reason


def test_an_early_return_under_a_runtime_test_is_only_noted(tmp_path):
    """The same shape under a test of the batch (not decidable without a run): the trace keeps
    its boundaries and notes the return as a step."""
    from flowtrace.index.build import IndexOptions

    models = tmp_path / "sglang" / "srt" / "models"
    models.mkdir(parents=True)
    for part in ("sglang", "sglang/srt"):
        (tmp_path / part / "__init__.py").write_text("")
    source = (SGLANG_LIKE / "sglang/srt/models/koppa.py").read_text()
    source = source.replace("if not self.return_aux_hidden_states:", "if not forward_batch.is_extend:")
    source = source.replace(
        "def forward(self, input_ids, hidden_states):\n        residual",
        "def forward(self, input_ids, hidden_states, forward_batch=None):\n        residual",
    )
    assert "forward_batch.is_extend" in source
    (models / "koppa.py").write_text(source)
    (models / "alpha.py").write_text((SGLANG_LIKE / "sglang/srt/models/alpha.py").read_text())
    layers = tmp_path / "sglang" / "srt" / "layers"
    layers.mkdir()
    for f in ("__init__.py", "base.py", "aux_capture.py"):
        (layers / f).write_text((SGLANG_LIKE / "sglang/srt/layers" / f).read_text())
    scan = api.scan(tmp_path, options=IndexOptions(use_cache=False, jobs=1))
    link = scan.project.row("KoppaForCausalLM").capture.returns
    assert link.kind == F.ReturnKind.EARLY_RETURN and not link.decided
    traced = api.trace(scan, "KoppaForCausalLM", [1, 2, 30], L)
    assert traced.outcome == F.Outcome.CAPTURES and traced.boundaries == (2, 3, 31)
    assert any(s.kind == "returns" and s.location.line == 26 for s in traced.steps)


# -- capture sites found by shape -----------------------------------------------------


def _shapes_scan():
    from pathlib import Path

    from flowtrace.index.build import IndexOptions

    return api.scan(
        Path(__file__).parent / "probe" / "agreement_engines" / "shapes", options=IndexOptions(use_cache=False, jobs=1)
    )


def test_metadata_hook_handed_to_the_layers_is_a_capture_site():
    """metadata_hook.py: the model builds ``HookSpecMetadata(self.layers_to_capture)`` (line 40),
    hands it to every layer as ``spec_metadata=`` (line 42), and the layer calls its recording
    method after ``self.mlp`` (line 29) with ``hidden_states + residual`` summed there: the
    layer's output, so identity ids i give b=i+1 and -1 never matches."""
    scan = _shapes_scan()
    c = scan.project.row("HookForCausalLM").capture
    assert c.site.mechanism == F.Mechanism.HOOK and c.site.callback_parameter == "spec_metadata"
    assert c.site.container_class.endswith("metadata_hook.HookSpecMetadata") and c.site.location.line == 42
    # evidence: the layer's call after its MLP, then the recording method it calls (line 15)
    assert c.point == F.OUTPUT and [str(e) for e in c.point_evidence] == [
        "sglang/srt/models/metadata_hook.py:29",
        "sglang/srt/models/metadata_hook.py:15",
    ]
    assert "records `hidden_states + residual`" in c.point_note
    assert api.trace(scan, "HookForCausalLM", None, 8).boundaries == (3, 5, 6)  # default (2, n//2, n-3)
    assert api.trace(scan, "HookForCausalLM", [-1, 3, 4], 8).boundaries == (4, 5)


def test_dict_store_of_what_a_flagged_layer_returns_in_a_helper_method():
    """flag_returned.py: ``_run_layers`` (a helper the forward calls, line 34) hands
    ``capture_input=idx in self.layers_to_capture`` to layer idx (line 40); the layer returns
    its input stream when flagged, through ``fold(..., keep=capture_input)`` before its MLP
    (line 23); the helper stores it in the caller's dict by idx (line 42); the forward reads it
    back in config order (line 35). Input point, ids + 1, nothing after the loop."""
    scan = _shapes_scan()
    c = scan.project.row("FlagReturnForCausalLM").capture
    assert c.site.mechanism == F.Mechanism.DICT and c.site.callback_parameter == "capture_input"
    assert c.site.function == "FlagReturnModel._run_layers" and c.site.location.line == 42
    assert c.point == F.INPUT and [str(e) for e in c.point_evidence] == ["sglang/srt/models/flag_returned.py:23"]
    assert c.concat_order == F.ConcatOrder.CONFIG and c.site.post_loop_at is None
    assert c.stream.kind == F.StreamKind.UNKNOWN  # the stored value is built inside the layer, not in the loop
    assert c.embedding_capturable is True and not c.last_layer_capturable
    assert api.trace(scan, "FlagReturnForCausalLM", [5, -1, 2], 8).boundaries == (6, 0, 3)  # config order
    assert api.trace(scan, "FlagReturnForCausalLM", [1, 3, 7], 8).boundaries == (2, 4)  # b=8 is never stored


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


def _edited_shapes_scan(tmp_path, model: str, old: str, new: str):
    """The shapes tree copied, with one passage of ``models/<model>`` changed, scanned."""
    import shutil
    from pathlib import Path

    from flowtrace.index.build import IndexOptions

    tree = tmp_path / "shapes"
    shutil.copytree(Path(__file__).parent / "probe" / "agreement_engines" / "shapes", tree)
    path = tree / "sglang" / "srt" / "models" / model
    text = path.read_text()
    assert text.count(old) == 1
    path.write_text(text.replace(old, new))
    return api.scan(tree, options=IndexOptions(use_cache=False, jobs=1))


def _edited_hook_scan(tmp_path, old: str, new: str):
    """The shapes tree copied, with one line of metadata_hook.py changed, scanned."""
    return _edited_shapes_scan(tmp_path, "metadata_hook.py", old, new)


def test_an_object_that_records_nothing_is_not_a_capture_path(tmp_path):
    """The same tree with the hook's recording line removed: the layers still call the
    method after their MLP, but it records nothing, so the point is not decided."""
    scan = _edited_hook_scan(tmp_path, "self.aux_hidden_states.append(hidden_states + residual)", "return None")
    c = scan.project.row("HookForCausalLM").capture
    assert c.site.mechanism == F.Mechanism.HOOK and c.point == F.UNKNOWN
    assert "does not define as a recording method" in c.point_note
    assert api.trace(scan, "HookForCausalLM", [1, 2], 8).outcome == F.Outcome.UNKNOWN


@pytest.mark.parametrize("label, point, boundaries", [
    ("self.layer_idx + 1", F.INPUT, (3, 4)),  # labelled as the next layer's input: index k -> b=k
    ("self.layer_idx * 2", F.UNKNOWN, None),  # not the layer's own index: not decided
])
def test_hook_label_is_read_from_the_layer_call(tmp_path, label, point, boundaries):
    """metadata_hook.py with the layer's label argument changed (line 29): the point follows
    the label the layer hands the recorder, relative to where it calls it (after its MLP)."""
    call = "spec_metadata.maybe_capture_hidden_states(self.layer_idx, hidden_states, residual)"
    scan = _edited_hook_scan(tmp_path, call, call.replace("self.layer_idx", label))
    assert scan.project.row("HookForCausalLM").capture.point == point
    assert api.trace(scan, "HookForCausalLM", [3, 4], 8).boundaries == boundaries


def test_buffer_slice_copy_is_a_capture_site():
    """buffer_copy.py: after layer i (line 21) ``buf[k].copy_(hidden_states + residual)`` (line
    23) copies the layer's output stream into a preallocated slot when ``i in wanted``, a
    ``frozenset`` alias of ``self.layers_to_capture`` (line 17): ids unchanged, i gives b=i+1;
    the copy runs after the layer, so the residual is never None there."""
    scan = _shapes_scan()
    c = scan.project.row("BufferCopyForCausalLM").capture
    assert c.site.mechanism == F.Mechanism.BUFFER and c.site.attribute == "layers_to_capture"
    assert c.site.location.file.endswith("models/buffer_copy.py") and c.site.location.line == 23
    assert (
        c.point == F.OUTPUT and c.site.container == "buf" and c.site.captured_expression == "hidden_states + residual"
    )
    assert c.stream.raising_index is None and c.embedding_capturable is False  # b=0 is never recorded
    assert api.trace(scan, "BufferCopyForCausalLM", None, 8).boundaries == (3, 5, 6)  # default (2, n//2, n-3)
    assert api.trace(scan, "BufferCopyForCausalLM", [5, -1, 2], 8).boundaries == (3, 6)  # loop order


@pytest.mark.parametrize(
    "old, new, point, first_none",
    [
        # the same buffer filled by a slice assignment: still after layer i
        ("buf[k].copy_(hidden_states + residual)", "buf[k, :] = hidden_states + residual", F.OUTPUT, None),
        # moved before the layer call: b=i, and the unguarded residual is None at index 0
        (
            (
                "            hidden_states, residual = layer(hidden_states, residual)\n"
                "            if i in wanted:\n"
                "                buf[k].copy_(hidden_states + residual)\n"
                "                k += 1\n"
            ),
            (
                "            if i in wanted:\n"
                "                buf[k].copy_(hidden_states + residual)\n"
                "                k += 1\n"
                "            hidden_states, residual = layer(hidden_states, residual)\n"
            ),
            F.INPUT,
            "residual",
        ),
    ],
)
def test_buffer_site_point_and_index_0_follow_the_layer_call(tmp_path, old, new, point, first_none):
    """buffer_copy.py edited: the point follows the side of the layer call; before it, the
    first iteration adds the ``residual = None`` of line 16 unguarded, as an append would."""
    scan = _edited_shapes_scan(tmp_path, "buffer_copy.py", old, new)
    c = scan.project.row("BufferCopyForCausalLM").capture
    assert c.site.mechanism == F.Mechanism.BUFFER and c.point == point
    assert c.site.first_none == first_none
    if first_none:
        assert c.site.first_none_at.line == 16 and c.stream.raising_index == 0


def test_a_returns_tests_are_those_of_the_statements_around_it():
    """The early-return reading climbs from a return through the statements around it (a
    clause, a case, a nested definition) to the function, keeping the ``if``/``while`` tests."""
    import ast

    from flowtrace.index.stream_facts import _parents, _tests_above

    fn = ast.parse(
        "def f():\n"
        "    if a:\n        while b:\n            try:\n                pass\n            except E:\n"
        "                match m:\n                    case 1:\n                        return 1\n"
        "    def g():\n        if c:\n            return 2\n"
        "    return x if d else y\n"
    ).body[0]
    parents = _parents(fn)
    returns = sorted((n for n in ast.walk(fn) if isinstance(n, ast.Return)), key=lambda r: r.lineno)
    assert [[ast.unparse(t) for t in _tests_above(r, parents)] for r in returns] == [["b", "a"], ["c"], []]
    assert parents[returns[2]] is fn

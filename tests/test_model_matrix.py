"""Cross-file resolution: one row per model class with its capture support."""

from __future__ import annotations

import pytest

from flowtrace.model import facts as F


def row(scan, name):
    r = scan.project.row(name)
    assert r is not None, name
    return r


@pytest.mark.parametrize(
    "name, support, transform, point, emb, last",
    [
        ("AlphaForCausalLM", "supported", F.PLUS_ONE, F.INPUT, True, False),
        ("BetaForCausalLM", "supported", F.IDENTITY, F.OUTPUT, False, True),
        ("GammaForCausalLM", "supported", F.CONDITIONAL, F.INPUT, True, False),
        ("DeltaForCausalLM", "inherited", F.PLUS_ONE, F.INPUT, True, False),
        ("OmegaVLForConditionalGeneration", "delegated", F.CONDITIONAL, F.INPUT, True, False),
        ("KappaMoeForCausalLM", "delegated", F.PLUS_ONE, F.OUTPUT, False, True),
    ],
)
def test_sglang_like_rows(sglang_scan, name, support, transform, point, emb, last):
    r = row(sglang_scan, name)
    assert r.registered
    assert r.support == support
    assert r.capture.effective_transform == transform
    assert (r.capture.point, r.capture.embedding_capturable, r.capture.last_layer_capturable) == (point, emb, last)


def test_delegation_is_resolved_to_the_wrapped_class(sglang_scan):
    c = row(sglang_scan, "OmegaVLForConditionalGeneration").capture
    assert c.delegates_to == "sglang.srt.models.gamma.GammaForCausalLM"
    assert c.holder == "sglang.srt.models.gamma.GammaModel"
    assert c.id_transform == F.DELEGATES


def test_inherited_setter_points_at_the_base_file(sglang_scan):
    c = row(sglang_scan, "DeltaForCausalLM").capture
    assert c.inherited and c.setter.location.file == "sglang/srt/models/alpha.py"


@pytest.mark.parametrize(
    "name, support",
    [
        ("LambdaForCausalLM", "broken"),
        ("IotaVLForConditionalGeneration", "broken"),
        ("PlainForCausalLM", "none"),
        ("SigmaVLForConditionalGeneration", "none"),
        ("EpsilonForCausalLM", "none"),
        ("ZetaForCausalLM", "broken"),
    ],
)
def test_rows_without_working_capture(sglang_scan, name, support):
    r = row(sglang_scan, name)
    assert r.support == support
    if support == "none":
        assert r.capture is None


def test_vllm_like_rows(vllm_scan):
    llama = row(vllm_scan, "LlamaForCausalLM")
    assert llama.support == "delegated" and llama.capture.inherited
    assert llama.capture.holder == "vllm.model_executor.models.llama.LlamaModel"  # via self._init_model()
    assert llama.capture.default_layers == "(2, num_layers // 2, num_layers - 3)"
    mistral = row(vllm_scan, "MistralForCausalLM")  # registered by dict, file has no markers
    assert mistral.registered and mistral.capture.holder == llama.capture.holder
    deepseek = row(vllm_scan, "DeepseekV3ForCausalLM")  # architecture name -> class
    assert deepseek.name == "DeepseekForCausalLM"
    assert deepseek.capture.holder == "vllm.model_executor.models.deepseek.DeepseekModel"  # via model_cls
    assert deepseek.capture.last_layer_capturable is True


def test_engine_interfaces_are_not_model_rows(vllm_scan):
    names = {r.name for r in vllm_scan.rows}
    assert "SupportsEagle3" not in names and "EagleModelMixin" not in names


def test_only_generation_registries_make_eagle3_targets(vllm_scan):
    embed = row(vllm_scan, "LlamaEmbeddingModel")
    assert embed.registered and not embed.generation_target
    assert row(vllm_scan, "LlamaForCausalLM").generation_target


def test_the_registries_part_reads_the_lookup_alone(vllm_scan):
    # registry.py maps "DeepseekV3ForCausalLM" to deepseek.DeepseekForCausalLM (another name),
    # "LlamaEmbeddingModel" sits in _EMBEDDING_MODELS, which the profile's generation_dicts
    # (_TEXT_GENERATION_MODELS, _MULTIMODAL_MODELS) leave out.
    from flowtrace.analysis.class_lookup import ClassLookup
    from flowtrace.analysis.registries import Registries

    project = vllm_scan.project
    models = "vllm.model_executor.models"
    registries = Registries(ClassLookup(project.files, project.conv))  # nothing above the lookup needed
    assert registries.architectures[f"{models}.deepseek.DeepseekForCausalLM"] == ("DeepseekV3ForCausalLM",)
    assert registries.architectures[f"{models}.llama_embed.LlamaEmbeddingModel"] == ("LlamaEmbeddingModel",)
    assert f"{models}.llama_embed.LlamaEmbeddingModel" not in registries.generation
    assert f"{models}.llama.LlamaForCausalLM" in registries.generation
    assert registries.architectures == project.registries.architectures

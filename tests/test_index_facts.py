"""Each fixture engine file states the pattern it reproduces; these tests check the facts."""

from __future__ import annotations

from flowtrace.model import facts as F


def facts_of(scan, path):
    return next(ff for ff in scan.files if ff.path == path)


def setter(scan, cls_name, method=None):
    for ff in scan.files:
        for s in ff.setters:
            if s.class_qualname.endswith("." + cls_name) and (method is None or s.method == method):
                return s
    raise AssertionError(f"no setter on {cls_name}")


def test_plus_one_setter_with_default_and_pp_guard(sglang_scan):
    s = setter(sglang_scan, "AlphaForCausalLM")
    assert s.id_transform == F.PLUS_ONE
    assert s.pp_guard is True
    assert s.default_layers == "[2, num_layers // 2, num_layers - 3]"
    assert s.writes == ("self.model.layers_to_capture",)
    assert s.location == F.Location("sglang/srt/models/alpha.py", 59)


def test_identity_setter_with_default_by_rebinding(sglang_scan):
    s = setter(sglang_scan, "BetaForCausalLM")
    assert s.id_transform == F.IDENTITY
    assert s.pp_guard is False
    assert s.default_layers == "[1, n // 2 - 1, n - 4]"


def test_conditional_setter_names_its_predicate(sglang_scan):
    s = setter(sglang_scan, "GammaForCausalLM")
    assert s.id_transform == F.CONDITIONAL
    assert "layer_ids and layer_ids[0] == 1" in s.transform_note
    assert {b.transform for b in s.branches} == {"default", F.PLUS_ONE, F.IDENTITY}


def test_delegating_setters(sglang_scan, vllm_scan):
    wrapper = setter(sglang_scan, "OmegaVLForConditionalGeneration")
    assert wrapper.id_transform == F.DELEGATES
    assert (wrapper.delegate, wrapper.delegate_method) == ("self.language_model", "set_eagle3_layers_to_capture")
    outer = setter(sglang_scan, "KappaMoeForCausalLM")
    assert outer.id_transform == F.PLUS_ONE and outer.delegate == "self.model"
    interface = setter(vllm_scan, "SupportsEagle3")
    assert interface.id_transform == F.DELEGATES and interface.delegate == "holder"


def test_capture_sites_mechanism_and_point(sglang_scan, vllm_scan):
    sites = {
        s.class_qualname.rsplit(".", 1)[-1]: s
        for scan in (sglang_scan, vllm_scan)
        for ff in scan.files
        for s in ff.capture_sites
    }
    assert (sites["AlphaModel"].mechanism, sites["AlphaModel"].point) == (F.APPEND, F.INPUT)
    assert (sites["BetaModel"].mechanism, sites["BetaModel"].point) == (F.APPEND, F.OUTPUT)
    assert sites["BetaModel"].split_residual and sites["BetaModel"].captured_expression == "hidden_states"
    # callbacks are decided by following them into the layer (see the matrix tests)
    assert (sites["GammaModel"].mechanism, sites["GammaModel"].callback_parameter) == (F.CALLBACK, "capture_output")
    assert (sites["KappaModel"].mechanism, sites["KappaModel"].callback_parameter) == (
        F.PACKER,
        "captured_last_layer_outputs",
    )
    llama = sites["LlamaModel"]
    assert (llama.mechanism, llama.point, llama.embedding_capturable, llama.last_layer_capturable) == (
        F.HELPER,
        F.INPUT,
        True,
        True,
    )
    deepseek = sites["DeepseekModel"]
    assert (deepseek.point, deepseek.embedding_capturable, deepseek.last_layer_capturable) == (F.INPUT, True, True)


def test_callback_uses_follow_the_layer_forward(sglang_scan):
    uses = {(u.class_qualname.rsplit(".", 1)[-1], u.parameter): u for ff in sglang_scan.files for u in ff.callback_uses}
    gamma = uses[("GammaDecoderLayer", "capture_output")]
    assert gamma.position == "before" and gamma.handed_to == "self.boundary.prepare"
    assert uses[("KappaDecoderLayer", "captured_last_layer_outputs")].position == "after"


def test_registry_entry_class_and_dict(sglang_scan, vllm_scan):
    entries = {r.architecture: r.target for ff in sglang_scan.files for r in ff.registry}
    assert entries["DeltaForCausalLM"] == "sglang.srt.models.delta.DeltaForCausalLM"
    assert entries["SigmaVLForConditionalGeneration"] == "sglang.srt.models.omega_vl.SigmaVLForConditionalGeneration"
    arch = {r.architecture: r.target for ff in vllm_scan.files for r in ff.registry}
    assert arch["DeepseekV3ForCausalLM"] == "vllm.model_executor.models.deepseek.DeepseekForCausalLM"


def test_file_without_markers_is_read_by_the_class_table(sglang_scan):
    delta = facts_of(sglang_scan, "sglang/srt/models/delta.py")
    (cls,) = delta.classes
    assert cls.bases == ("sglang.srt.models.alpha.AlphaForCausalLM",)
    assert delta.setters == ()


def test_capture_modes_concat_fc_and_config_reads(sglang_scan):
    draft = facts_of(sglang_scan, "sglang/srt/speculative/eagle3_draft.py")
    assert sorted(m.mode for m in draft.capture_modes) == ["FULL", "LAST", "NULL"]
    assert [c.expression for c in draft.concat_sites] == ["cat(aux_hidden_states, dim=-1)"]
    (fc,) = draft.fc_definitions
    assert fc.in_features == "config.target_hidden_size * 3"
    assert {(r.function, r.default) for r in draft.config_reads} >= {
        ("draft_layer_ids", "None"),
        ("aux_count", "[1, 2, 3, 4]"),
    }


def test_append_after_layer_with_shifted_label_is_an_input_point():
    """`if idx + 1 in attr: aux.append(h + r)` after layer idx records boundary idx + 1 under label idx + 1."""
    from flowtrace.index.parse import analyze_bytes
    from flowtrace.engines.profiles import Conventions, load_all

    source = b'''
class Model:
    def forward(self, h):
        r = None
        aux_hidden_states = []
        for idx, layer in enumerate(self.layers):
            h, r = layer(h, r)
            if idx + 1 in self.aux_hidden_state_layers:
                aux_hidden_states.append(h + r)
        return h, aux_hidden_states
'''
    (site,) = analyze_bytes("m.py", source, Conventions.merge(load_all())).capture_sites
    assert (site.mechanism, site.point) == (F.APPEND, F.INPUT)
    assert (site.embedding_capturable, site.last_layer_capturable) == (False, True)


def test_constants_are_not_constructed_classes():
    """``None`` / ``True`` are no class (libcst spelled them as capitalised names, so the old
    analyser recorded ``super().__init__(None)`` and ``self.x = None`` as building ``None``)."""
    from flowtrace.engines.profiles import Conventions, load_all
    from flowtrace.index.parse import analyze_bytes

    source = (
        b"import torch\n"
        b"class Layer(torch.nn.Module):\n"
        b"    def __init__(self, config, norm=None):\n"
        b"        super().__init__(None, True, Norm)\n"
        b"        self.aux_hidden_state_layers = None\n"
        b"        self.mlp = Mlp(config) if config else None\n"
    )
    facts = analyze_bytes("pkg/layer.py", source, Conventions.merge(load_all()))
    (cls,) = facts.classes
    assert [(a.attribute, a.callee) for a in cls.super_args] == [("#2", "Norm")]
    assert {a.callee for a in cls.assignments} == {"Mlp"}  # Norm is handed on, not built here
    assert ("mlp", "Mlp") in {(a.attribute, a.callee) for a in cls.assignments}


def test_sites_on_any_line_of_a_statement_and_in_headers_are_found():
    """The collector walks a statement's expressions only when one of their lines names a
    site word; a word on a continuation line, in a decorator or in a default still counts,
    and each site keeps its enclosing function."""
    from flowtrace.engines.profiles import Conventions, load_all
    from flowtrace.index.parse import analyze_bytes

    source = (
        b"class M:\n"
        b"    @hook(getattr(cfg, 'eagle_aux_hidden_state_layer_ids'))\n"
        b"    def forward(self, mode=CaptureHiddenMode.NULL):\n"
        b"        h = run(\n"
        b"            x,\n"
        b"            CaptureHiddenMode.FULL,\n"
        b"        )\n"
        b"        if ok:\n"
        b"            return torch.cat(\n"
        b"                aux_hidden_states, dim=-1)\n"
        b"        return h\n"
        b"unrelated = value.other\n"
    )
    facts = analyze_bytes("pkg/m.py", source, Conventions.merge(load_all()))
    assert [(m.location.line, m.mode, m.function) for m in facts.capture_modes] == [
        (3, "NULL", "M.forward"),
        (6, "FULL", "M.forward"),
    ]
    assert [(c.location.line, c.function) for c in facts.concat_sites] == [(9, "M.forward")]
    assert [(r.location.line, r.key, r.function) for r in facts.config_reads] == [
        (2, "eagle_aux_hidden_state_layer_ids", "M.forward")
    ]

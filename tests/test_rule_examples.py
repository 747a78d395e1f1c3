"""Every rule's VALID / INVALID examples (Fixit style) run: INVALID ones fire, VALID ones do not.

Each example is a complete module. It is written to ``models/example.py`` of a small engine tree
(SGLang-shaped by default, vLLM- or LMDeploy-shaped for ``profile="vllm"`` / ``"lmdeploy"``) next to three sibling
models with the engine's usual conventions (plus-one setter, capture before layer i, guarded residual),
so rules that compare a class with its siblings can judge it. Only findings in example.py of the
rule under test count. FT016 (suppressions) is produced by the check runner, so its examples go
through :func:`flowtrace.lint.runner.run_check`.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from flowtrace import api
from flowtrace.checks.base import all_rules
from flowtrace.index.build import IndexOptions
from flowtrace.lint.runner import run_check

from fixture_paths import FIXTURES

SIBLING = '''from sglang.srt.layers.base import Module, ModuleList


class Sib{X}Model(Module):
    def __init__(self, config):
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.layers = ModuleList([])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states):
        residual = None
        aux_hidden_states = []
        for i in range(self.start_layer, self.end_layer):
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states if residual is None else hidden_states + residual)
            hidden_states, residual = self.layers[i](hidden_states, residual)
        if len(aux_hidden_states) == 0:
            return hidden_states
        return hidden_states, aux_hidden_states


class Sib{X}ForCausalLM(Module):
    def __init__(self, config):
        self.config = config
        self.model = Sib{X}Model(config)
        self.capture_aux_hidden_states = False

    def forward(self, input_ids, hidden_states):
        out = self.model(input_ids, hidden_states)
        if self.capture_aux_hidden_states:
            hidden_states, aux = out
            return hidden_states, aux
        return out

    def get_embed_and_head(self):
        return None, None

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.capture_aux_hidden_states = True
        if layer_ids is None:
            num_layers = self.config.num_hidden_layers
            self.model.layers_to_capture = [2, num_layers // 2, num_layers - 3]
        else:
            self.model.layers_to_capture = [val + 1 for val in layer_ids]


EntryClass = Sib{X}ForCausalLM
'''

SGLANG_HEADER = "from sglang.srt.layers.base import Module, ModuleList\n\n"
VLLM_HEADER = "from vllm.model_executor.models.interfaces import EagleModelMixin, Module, SupportsEagle3\n\n"


def _sglang_tree(root: Path, code: str) -> str:
    models = root / "sglang/srt/models"
    (root / "sglang/srt/layers").mkdir(parents=True)
    models.mkdir(parents=True)
    for pkg in ("sglang", "sglang/srt", "sglang/srt/layers", "sglang/srt/models"):
        (root / pkg / "__init__.py").write_text("")
    (root / "sglang/srt/layers/base.py").write_text(
        "class Module:\n"
        "    def __call__(self, *a, **k):\n"
        "        return self.forward(*a, **k)\n\n\n"
        "class ModuleList(list):\n"
        "    pass\n"
    )
    for x in "ABC":
        (models / f"sib_{x.lower()}.py").write_text(SIBLING.replace("{X}", x))
    (models / "example.py").write_text(SGLANG_HEADER + code)
    return "sglang/srt/models/example.py"


def _vllm_tree(root: Path, code: str) -> str:
    models = root / "vllm/model_executor/models"
    models.mkdir(parents=True)
    for pkg in ("vllm", "vllm/model_executor", "vllm/model_executor/models"):
        (root / pkg / "__init__.py").write_text("")
    interfaces = FIXTURES / "vllm_like/vllm/model_executor/models/interfaces.py"
    (models / "interfaces.py").write_text(interfaces.read_text())
    classes = re.findall(r"^class (\w+(?:ForCausalLM|ForConditionalGeneration))\b", code, re.M)
    entries = "".join(f'    "{c}": ("example", "{c}"),\n' for c in classes)
    (models / "registry.py").write_text(f"_TEXT_GENERATION_MODELS = {{\n{entries}}}\n")
    (models / "example.py").write_text(VLLM_HEADER + code)
    return "vllm/model_executor/models/example.py"


LMDEPLOY_HEADER = "import torch\nfrom torch import nn\n\n"


def _lmdeploy_tree(root: Path, code: str) -> str:
    """An LMDeploy-shaped tree: ids come from a config attribute or build-context field (no
    setter), config builders may sit in the example, and ``MODULE_MAP`` registers its classes."""
    models = root / "lmdeploy/pytorch/models"
    models.mkdir(parents=True)
    for pkg in ("lmdeploy", "lmdeploy/pytorch", "lmdeploy/pytorch/models"):
        (root / pkg / "__init__.py").write_text("")
    classes = re.findall(r"^class (\w+(?:ForCausalLM|ForConditionalGeneration))\b", code, re.M)
    entries = "".join(f"    '{c}': 'lmdeploy.pytorch.models.example.{c}',\n" for c in classes)
    (models / "module_map.py").write_text(f"MODULE_MAP = dict()\n\nMODULE_MAP.update({{\n{entries}}})\n")
    (models / "example.py").write_text(LMDEPLOY_HEADER + code)
    return "lmdeploy/pytorch/models/example.py"


_TREES = {"": _sglang_tree, "vllm": _vllm_tree, "lmdeploy": _lmdeploy_tree}


def _findings(tmp_path: Path, code: str, rule: str, profile: str) -> list:
    root = tmp_path / "engine"
    example = _TREES[profile](root, code)
    if rule == "FT016":
        outcome = run_check(root, select=["FT009", "FT016"], jobs=1, use_cache=False, isolated=True, exit_zero=True)
        found = outcome.findings
    else:
        found = api.findings(api.scan(root, options=IndexOptions(use_cache=False, jobs=1)), select=(rule,))
    return [f for f in found if f.rule == rule and f.file == example]


CASES = [
    pytest.param(rule.code, kind, i, example, id=f"{rule.code}-{kind}-{i}")
    for rule in all_rules()
    for kind, examples in (("valid", rule.valid), ("invalid", rule.invalid))
    for i, example in enumerate(examples)
]


HEADER_LINES = {"": SGLANG_HEADER.count("\n"), "vllm": VLLM_HEADER.count("\n"), "lmdeploy": LMDEPLOY_HEADER.count("\n")}


@pytest.mark.parametrize("code, kind, index, example", CASES)
def test_rule_example(tmp_path, code, kind, index, example):
    found = _findings(tmp_path, example.code, code, example.profile)
    if kind == "invalid":
        assert found, f"{code} INVALID example {index} ({example.note or 'no note'}) does not fire"
        line = example.line + HEADER_LINES[example.profile]
        matching = [
            f for f in found
            if f.line == line and f.kind == example.kind and example.message in f.message
            and f.consequence == example.consequence and f.severity == example.severity
        ]
        got = [(f.line - HEADER_LINES[example.profile], f.kind, f.consequence, f.severity, f.message) for f in found]
        assert matching, (
            f"{code} INVALID example {index} fires, but not at line {example.line} with {example.kind}, "
            f"{example.consequence}, {example.severity} and {example.message!r}: {got}"
        )
    else:
        assert not found, f"{code} VALID example {index} fires: {[f.message for f in found]}"


def test_every_invalid_example_pins_line_kind_and_message():
    for rule in all_rules():
        for i, example in enumerate(rule.invalid):
            assert (
                example.line > 0 and example.kind is not None and example.message
            ), f"{rule.code} INVALID example {i} pins nothing"


def test_every_invalid_example_pins_consequence_and_severity():
    """What a finding does to a served draft, and the severity that follows, are part of the pin."""
    for rule in all_rules():
        for i, example in enumerate(rule.invalid):
            assert example.severity in ("error", "warning", "info"), f"{rule.code} INVALID example {i}"
            assert example.consequence is not None or example.severity == "info", f"{rule.code} INVALID example {i}"


def test_every_rule_has_both_kinds_of_example():
    for rule in all_rules():
        assert rule.valid and rule.invalid, rule.code

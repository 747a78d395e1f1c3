"""DFlash capture shapes read by their structure (tests/fixtures/methods/sglang_dflash_shapes).

Every expectation is read off the fixture's code: a loop that records a layer's input turns index
i into boundary i, one that records after the layer into i + 1; a +1 setter turns a draft's id i
(the output of layer i) into index i + 1.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fixture_paths import line_of as _line
from flowtrace import api
from flowtrace.model.facts import Outcome

FIXTURE = Path(__file__).parent / "fixtures" / "methods" / "sglang_dflash_shapes"
MODELS = FIXTURE / "sglang" / "srt" / "models"
L = 32


@pytest.fixture(scope="module")
def eagle3():
    return api.scan(FIXTURE, options=api.IndexOptions(use_cache=False, jobs=1))


@pytest.fixture(scope="module")
def dflash():
    return api.scan(FIXTURE, options=api.IndexOptions(use_cache=False, jobs=1), method="dflash")


def _findings(result, rule: str, file: str) -> list:
    return [f for f in api.findings(result) if f.rule == rule and Path(f.file).name == file]


@pytest.mark.parametrize(
    ("model", "ids", "boundaries"),
    [
        ("PlusAForCausalLM", [1, 15, 28], (2, 16, 29)),
        ("AfterForCausalLM", [1, 15, 28], (2, 16, 29)),  # identity, recorded after layer i
        ("EarlyForCausalLM", [1, 15, 28], (1, 15, 28)),  # identity, recorded before layer i
        ("MarkedForCausalLM", [1, 15, 28], (2, 16, 29)),  # +1, the marked layer records its input
        ("MarkedForCausalLM", [0, 31], (1, 32)),  # 31 + 1 = 32 is past the layers: recorded after the loop
        ("NamedForCausalLM", [1, 15, 28], (2, 16, 29)),  # +1, recorded before layer.forward(...)
        ("TappedForCausalLM", [1, 15, 31], (2, 16, 32)),  # identity, recorded after layer.layer_id runs
    ],
)
def test_dflash_boundaries_follow_each_shape(dflash, model, ids, boundaries):
    traced = api.trace(dflash, model, ids, L)
    assert traced.outcome == Outcome.CAPTURES and traced.boundaries == boundaries


def test_no_row_of_the_fixture_is_broken_for_dflash(dflash):
    assert {r.name: r.support for r in dflash.rows if r.registered and r.support == "broken"} == {}
    assert not [f for f in api.findings(dflash) if f.rule == "FT004"]


def test_ft007_compares_boundaries_not_the_spelling(dflash):
    assert _findings(dflash, "FT007", "after.py") == []  # identity after the layer = +1 before it
    (early,) = _findings(dflash, "FT007", "early.py")
    assert early.line == _line(MODELS / "early.py", "def set_dflash_layers_to_capture")
    # own setters: plus.py's three, marked, named, guarded and switch add 1; after and early do not
    # (tapped's wrapper delegates and its model's setter only ever receives the wrapper's ids)
    assert "uses identity; 7 of 9 setters in this engine use plus_one (id i is boundary i here, i + 1 on theirs)" in (
        early.message
    )


def test_ft007_keeps_the_spelling_where_an_id_names_the_embedding(eagle3):
    # EAGLE-3's -1 (the embedding) becomes b = 0 through +1 before layer 0, and no state at all
    # through identity after each layer: after.py's EAGLE-3 setter differs from plus.py's three
    # and overlap.py's switch setter (the engine's other EAGLE-3 setters)
    (after,) = _findings(eagle3, "FT007", "after.py")
    assert after.line == _line(MODELS / "after.py", "def set_eagle3_layers_to_capture")
    assert "uses identity; 4 of 5 setters in this engine use plus_one" in after.message


def test_an_overlap_path_shut_off_while_capturing_skips_no_capture(eagle3, dflash):
    assert _findings(dflash, "FT027", "overlap.py") == []
    (switch,) = _findings(eagle3, "FT027", "overlap.py")  # the EAGLE-3 setter leaves dflash_capture off
    assert switch.line == _line(
        MODELS / "overlap.py", "hidden_states = model_forward_stages(", after="class SwitchModel"
    )


def test_a_loop_only_another_methods_setter_feeds_is_that_familys(eagle3):
    # without a DFlash draft the marked and tapped loops are fed by no EAGLE-3 setter: FT018, whose
    # feed is the DFlash setter (marks on the layers; DFlash's own attribute), never FT002's
    # "no setter of any capture family writes it"
    ft018 = {Path(f.file).name: f for f in api.findings(eagle3) if f.rule == "FT018"}
    assert ft018["marked.py"].line == _line(MODELS / "marked.py", "captured_last_layer_outputs=(")
    assert ft018["tapped.py"].line == _line(MODELS / "tapped.py", "aux_hidden_states.append(hidden_states)")
    assert "set_dflash_layers_to_capture" in ft018["marked.py"].message
    assert not [f for f in api.findings(eagle3) if f.rule == "FT002"]


EAGLE3_ONLY = '''\
from sglang.srt.layers.aux_capture import AuxHiddenStateList
from sglang.srt.layers.base import Module, ModuleList
from sglang.srt.models.plus import PlusDecoderLayer


class EagleOnlyModel(Module):
    def __init__(self, config):
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.layers = ModuleList([PlusDecoderLayer(i) for i in range(config.num_hidden_layers)])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states):
        residual = None
        aux_hidden_states = AuxHiddenStateList()
        for i in range(self.start_layer, self.end_layer):
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states + residual if residual is not None else hidden_states)
            hidden_states, residual = self.layers[i](hidden_states, residual)
        if len(aux_hidden_states) == 0:
            return hidden_states
        return hidden_states, aux_hidden_states


class EagleOnlyForCausalLM(Module):
    def __init__(self, config):
        self.config = config
        self.model = EagleOnlyModel(config)

    def forward(self, input_ids, hidden_states):
        return self.model(input_ids, hidden_states)

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.model.layers_to_capture = [val + 1 for val in layer_ids]


EntryClass = EagleOnlyForCausalLM
'''


def test_ft018_hint_names_the_setter_of_the_method_checked(tmp_path):
    # a class with only the EAGLE-3 setter, scanned for DFlash: its loop (PlusModel's) is fed by
    # the other family, and what to add is the DFlash setter, not the EAGLE-3 one it already has
    import shutil

    tree = tmp_path / "tree"
    shutil.copytree(FIXTURE, tree)
    (tree / "sglang" / "srt" / "models" / "eagle_only.py").write_text(EAGLE3_ONLY)
    result = api.scan(tree, options=api.IndexOptions(use_cache=False, jobs=1), method="dflash")
    (finding,) = [f for f in api.findings(result) if f.rule == "FT018" and "EagleOnlyForCausalLM" in f.message]
    assert "has no set_dflash_layers_to_capture()" in finding.message
    assert finding.hint.startswith("Add the DFlash setter beside the other family's")

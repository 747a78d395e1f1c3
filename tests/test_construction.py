"""Construction a class does itself (issue 25 item 1): a wrapper's own ``__init__`` that
builds its language model by a literal architecture name, and a subclass that only swaps the
class attribute its base constructs from. Expectations are written from the fixture's code
(tests/fixtures/engines/construct_like), whose docstrings say what each class does."""

from __future__ import annotations

import pytest

from fixture_paths import FIXTURES
from flowtrace import api
from flowtrace.index.build import IndexOptions
from flowtrace.model import facts as F

CONSTRUCT_LIKE = FIXTURES / "construct_like"
LLAMA_MODEL = "vllm.model_executor.models.llama.LlamaModel"


@pytest.fixture(scope="module")
def scan():
    return api.scan(CONSTRUCT_LIKE, options=IndexOptions(use_cache=False, jobs=1))


def row(scan, name):
    r = scan.project.row(name)
    assert r is not None, name
    return r


def test_the_base_wrapper_builds_llama_by_name_and_captures(scan):
    r = row(scan, "BaseVLForConditionalGeneration")
    assert r.support == "delegated" and r.capture.holder == LLAMA_MODEL


@pytest.mark.parametrize("name", ["OwnInitVLForConditionalGeneration", "TowerForConditionalGeneration"])
def test_own_init_building_another_architecture_is_not_the_bases_language_model(scan, name):
    # vl.py / tower.py: Module.__init__(self) then init_registered_model(..., architectures=["PlainForCausalLM"]);
    # PlainModel lacks EagleModelMixin, so the interface setter's assertion fails.
    r = row(scan, name)
    assert r.support == "broken"
    assert r.capture.holder != LLAMA_MODEL
    assert F.ProblemKind.DELEGATE_LACKS_SETTER in {p.kind for p in r.chain.problems}
    assert "PlainModel" in " ".join(r.capture.problems)


def test_the_cheap_tier_reads_a_factory_handed_an_architecture_name(scan):
    # tower.py names no capture marker: the class table must still see the construction.
    tower = scan.project.lookup.classes["vllm.model_executor.models.tower.TowerForConditionalGeneration"]
    assert [(a.attribute, a.callee) for a in tower.assignments if a.attribute != "*"] == [
        ("language_model", "arch:PlainForCausalLM")
    ]


def test_interface_holder_finding_names_the_real_holder(scan):
    findings = [f for f in api.findings(scan) if f.rule == "FT021"]
    flagged = {f.message.split(" ", 1)[0] for f in findings}
    # modelcls.py: SwappedCausalLM only sets model_cls = PlainModel, which BaseCausalLM's
    # __init__ builds as self.model: the interface setter's assertion fails for it too.
    assert flagged == {"OwnInitVLForConditionalGeneration", "TowerForConditionalGeneration", "SwappedCausalLM"}
    assert all("PlainModel" in f.message for f in findings)
    swapped = next(f for f in findings if f.message.startswith("SwappedCausalLM"))
    assert "model_cls" in swapped.message and "BaseCausalLM" in swapped.message


def test_a_subclass_setting_the_class_attribute_its_base_builds_from(scan):
    # modelcls.py: BaseCausalLM builds self.model = self.model_cls(config) with model_cls =
    # LlamaModel; SwappedCausalLM only sets model_cls = PlainModel (no EagleModelMixin).
    assert row(scan, "BaseCausalLM").capture.holder == LLAMA_MODEL
    swapped = row(scan, "SwappedCausalLM")
    assert swapped.support == "broken" and swapped.capture.holder != LLAMA_MODEL
    assert "self.model = PlainModel" in " ".join(swapped.capture.problems)
    base = scan.project.lookup.classes["vllm.model_executor.models.modelcls.BaseCausalLM"]
    assert [(a.attribute, a.via) for a in base.assignments if a.attribute == "model"] == [("model", "attr:model_cls")]

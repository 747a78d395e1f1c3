"""Engine family by content (issue 25 item 2): a fork whose package is renamed gets the
profile whose names it defines, with the package prefix mapped, and the output says which
profile was chosen and why. Expected values are read from tests/fixtures/engines/fork_like."""

from __future__ import annotations

import json

import pytest

from fixture_paths import FIXTURES, SGLANG_LIKE, VLLM_LIKE
from flowtrace import api
from flowtrace.engines.family import How, choose
from flowtrace.index.build import IndexOptions
from flowtrace.render.scan_json import scan_document
from flowtrace.render.text import scan_text

FORK_LIKE = FIXTURES / "fork_like"


@pytest.fixture(scope="module")
def fork_scan():
    return api.scan(FORK_LIKE, options=IndexOptions(use_cache=False, jobs=1))


def test_a_renamed_fork_gets_one_profile_by_content(fork_scan):
    assert [p.name for p in fork_scan.profiles] == ["vllm"]  # not every profile merged
    choice = fork_scan.choice
    assert choice.how == How.CONTENT and choice.package_map == (("vllm", "forkllm"),)
    # interfaces.py defines these (the profile names them as interface, holder and setters)
    for name in ("class SupportsEagle3", "class EagleModelMixin", "def set_aux_hidden_state_layers"):
        assert name in choice.reason


def test_the_registry_prefix_is_mapped_into_the_fork(fork_scan):
    # registry.py: "ForkedForCausalLM": ("forked", "ForkedForCausalLM"); forked.py names no marker.
    forked = fork_scan.project.row("ForkedForCausalLM")
    assert forked.registered and forked.qualname == "forkllm.model_executor.models.forked.ForkedForCausalLM"
    assert forked.capture.holder == "forkllm.model_executor.models.llama.LlamaModel"


def test_the_output_says_which_profile_and_why(fork_scan):
    doc = json.loads(json.dumps(scan_document(fork_scan)))
    assert doc["profile_choice"]["profiles"] == ["vllm"] and doc["profile_choice"]["how"] == "content"
    assert doc["profile_choice"]["package_map"] == {"vllm": "forkllm"}
    assert "engine profile(s): vllm (by content:" in scan_text(fork_scan, [])


@pytest.mark.parametrize(
    "root, name, path",
    [(SGLANG_LIKE, "sglang", "sglang/srt/models/"), (VLLM_LIKE, "vllm", "vllm/model_executor/models/")],
)
def test_an_engine_found_by_path_says_so(root, name, path):
    profiles, choice = choose(root)
    assert [p.name for p in profiles] == [name] and choice.how == How.PATH and path in choice.reason


def test_a_tree_defining_no_profile_name_merges_every_profile(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text("class Model:\n    pass\n")
    profiles, choice = choose(tmp_path)
    assert choice.how == How.ALL and len(profiles) > 1

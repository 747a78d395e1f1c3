"""Scanning a package folder itself (``flowtrace scan engine/vllm``): its modules must be named
as its own absolute imports name them, and a holder whose in-tree base cannot be resolved is
never said to lack the setter (issue 25, the bug found on vLLM's MistralForCausalLM).
Expectations from reading tests/fixtures/engines/pkgroot_like (mistral.py's docstring)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fixture_paths import FIXTURES
from flowtrace import api
from flowtrace.analysis.answer import verdict
from flowtrace.index.build import IndexOptions
from flowtrace.index.syntax import module_name
from flowtrace.engines.profiles import root_package
from flowtrace.model import facts as F

PKGROOT_LIKE = FIXTURES / "pkgroot_like"
OPTIONS = IndexOptions(use_cache=False, jobs=1)


def _rows(root: Path) -> dict[str, tuple]:
    scan = api.scan(root, options=OPTIONS)
    return {
        r.name: (
            r.support,
            r.capture.holder.rsplit(".", 1)[-1] if r.capture and r.capture.holder else None,
            r.registered,
        )
        for r in scan.project.rows
    }


def test_module_names_take_the_package_the_root_is():
    assert root_package(PKGROOT_LIKE) == ""
    assert root_package(PKGROOT_LIKE / "vllm") == "vllm"
    assert root_package(PKGROOT_LIKE / "vllm" / "model_executor" / "models") == "vllm.model_executor.models"
    assert module_name("models/llama.py", "vllm.model_executor") == "vllm.model_executor.models.llama"
    assert module_name("models/__init__.py", "") == "models"


@pytest.mark.parametrize("sub", ["vllm", "vllm/model_executor"])
def test_scanning_the_package_itself_gives_the_rows_of_its_parent(sub):
    parent = _rows(PKGROOT_LIKE)
    # mistral.py: MistralForCausalLM builds MistralModel (a LlamaModel of llama.py, by its absolute path)
    assert parent["MistralForCausalLM"] == ("delegated", "MistralModel", True)
    assert parent["LlamaForCausalLM"] == ("delegated", "LlamaModel", True)
    # models/dsa/ is outside vllm/model_executor
    inside = {k: v for k, v in parent.items() if k != "FastDsaForCausalLM"}
    assert _rows(PKGROOT_LIKE / sub) == (parent if sub == "vllm" else inside)


def test_the_profile_is_found_by_path_when_the_root_is_its_package():
    scan = api.scan(PKGROOT_LIKE / "vllm", options=OPTIONS)
    assert scan.choice.how == "path" and scan.choice.names == ("vllm",)


def test_an_unresolved_in_tree_base_makes_the_delegate_unknown_not_raising(tmp_path):
    # The same package copied under another name: its `from vllm.… import LlamaModel` resolves
    # to nothing, and legacy/llama.py's LlamaModel makes the bare name ambiguous. MistralModel
    # may still inherit the setter's method from the real base: no "raises".
    copy = tmp_path / "renamed"
    shutil.copytree(PKGROOT_LIKE / "vllm", copy)
    scan = api.scan(copy, options=OPTIONS)
    row = scan.project.row("MistralForCausalLM")
    assert row is not None and row.chain is not None
    kinds = {p.kind for p in row.chain.problems}
    assert F.ProblemKind.DELEGATE_LACKS_SETTER not in kinds
    assert F.ProblemKind.DELEGATE_UNRESOLVED in kinds
    assert verdict(row).outcome == F.Outcome.UNKNOWN
    assert "LlamaModel" in " ".join(row.capture.problems)


def test_a_registry_entry_naming_another_package_loads_what_its_init_binds():
    # registry.py: "DsaForCausalLM": ("vllm.models.dsa", "DsaForCausalLM"); models/dsa/__init__.py binds
    # it to fast.FastDsaForCausalLM (aliased) or to mistral.MistralForCausalLM (another package),
    # never to llama's LlamaForCausalLM (the TYPE_CHECKING-only binding).
    scan = api.scan(PKGROOT_LIKE, options=OPTIONS)
    assert sorted(scan.project.registries.registered_classes("vllm.models.dsa.DsaForCausalLM")) == [
        "vllm.model_executor.models.mistral.MistralForCausalLM",
        "vllm.models.dsa.fast.FastDsaForCausalLM",
    ]
    rows = {r.name: r for r in scan.project.rows}
    assert rows["FastDsaForCausalLM"].registered and rows["FastDsaForCausalLM"].architectures == ("DsaForCausalLM",)
    assert set(rows["MistralForCausalLM"].architectures) == {"DsaForCausalLM", "MistralForCausalLM"}
    assert rows["LlamaForCausalLM"].architectures == ("LlamaForCausalLM",)

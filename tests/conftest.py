"""Shared fixtures: scans of the fixture engines, computed once per session.

Under ``CI=true`` hypothesis runs the ``ci`` profile: derandomised (the same examples every
run, so a red CI build is reproducible and a green one is not luck), no example database,
no deadline (shared CI machines have noisy timings). Elsewhere the default profile keeps
exploring new examples.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from fixture_paths import SGLANG_LIKE, VLLM_LIKE

CI = os.environ.get("CI", "").lower() == "true"

try:
    from hypothesis import settings
except ImportError:  # pragma: no cover - hypothesis is a dev dependency
    settings = None
if settings is not None:
    settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
    if CI:
        settings.load_profile("ci")
# The fact cache's per-user key: the tests' own, out of the real home folder (only this file is
# redirected: $XDG_CACHE_HOME stays, other libraries' caches live there).
# Removed when the run ends: the suite leaves no folder behind in the temp dir.
_KEY_DIR = tempfile.mkdtemp(prefix="flowtrace-tests-key-")
atexit.register(shutil.rmtree, _KEY_DIR, True)
os.environ["FLOWTRACE_CACHE_KEY"] = os.path.join(_KEY_DIR, "key")


def _scan(root: Path):
    from flowtrace import api
    from flowtrace.index.build import IndexOptions

    return api.scan(root, options=IndexOptions(use_cache=False, jobs=1))


@pytest.fixture(scope="session")
def sglang_scan():
    return _scan(SGLANG_LIKE)


@pytest.fixture(scope="session")
def vllm_scan():
    return _scan(VLLM_LIKE)

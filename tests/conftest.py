"""Shared fixtures: scans of the fixture engines, computed once per session."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from fixture_paths import SGLANG_LIKE, VLLM_LIKE

# The fact cache's per-user key lives under $XDG_CACHE_HOME/flowtrace: keep the tests' own key
# (and anything else they would put there) out of the real home folder.
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="flowtrace-tests-xdg-")


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

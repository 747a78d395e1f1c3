"""Shared fixtures: scans of the fixture engines, computed once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixture_paths import SGLANG_LIKE, VLLM_LIKE


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

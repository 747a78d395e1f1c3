"""The same tree gives the same answer however it is scanned: cold, warm, serial, in a pool.

The JSON must be byte-identical apart from the timing fields (``stats.seconds``,
``stats.files_from_cache``); the facts themselves must be equal. The pool is forced on (the
fixture engines are smaller than the work that normally pays for forking one), and a spy
checks that it really ran, once.
"""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from fixture_paths import FIXTURES
from flowtrace.cli.main import main
from flowtrace.index import build

ENGINES = ["sglang_like", "vllm_like"]


def _copy(name, tmp_path):
    root = tmp_path / name
    shutil.copytree(FIXTURES / name, root, ignore=shutil.ignore_patterns(".flowtrace_cache", "__pycache__"))
    return root


def _scan_json(root, *args):
    out = CliRunner().invoke(main, ["scan", str(root), "--format", "json", *args])
    assert out.exit_code in (0, 1), out.output
    doc = json.loads(out.stdout)
    stats = doc["stats"]
    for key in ("seconds", "files_from_cache"):
        assert key in stats
        stats.pop(key)
    return json.dumps(doc, sort_keys=True), doc


@pytest.fixture
def pool_spy(monkeypatch):
    """Force the pool on for any amount of work and count how often one starts."""
    starts = []
    original = build._Parser._start

    def start(self):
        starts.append(self.jobs)
        return original(self)

    monkeypatch.setattr(build, "POOL_MIN_WORK", 0)
    monkeypatch.setattr(build._Parser, "_start", start)
    return starts


@pytest.mark.parametrize("engine", ENGINES)
def test_json_is_identical_cold_warm_serial_and_pooled(engine, tmp_path, pool_spy):
    root = _copy(engine, tmp_path)
    cache = tmp_path / "cache"
    serial, doc = _scan_json(root, "--no-cache", "--jobs", "1")
    assert not pool_spy, "--jobs 1 must not start a pool"
    pooled, _ = _scan_json(root, "--no-cache", "--jobs", "3")
    assert pool_spy == [3], "a multi-job cold scan starts exactly one pool"
    cold_cached, _ = _scan_json(root, "--cache-dir", str(cache), "--jobs", "2")
    warm, _ = _scan_json(root, "--cache-dir", str(cache), "--jobs", "2")
    warm_serial, _ = _scan_json(root, "--cache-dir", str(cache), "--jobs", "1")
    assert pool_spy == [3, 2], "a warm scan has nothing to parse and starts no pool"
    assert serial == pooled == cold_cached == warm == warm_serial
    assert doc["models"], "the comparison must cover a non-empty model matrix"


@pytest.mark.parametrize("engine", ENGINES)
def test_facts_are_equal_in_a_pool_and_serially(engine, tmp_path, pool_spy):
    from flowtrace.engines.profiles import select_profiles

    root = _copy(engine, tmp_path)
    profiles = select_profiles(root, None)
    serial = build.build_index(root, profiles, build.IndexOptions(jobs=1, use_cache=False, progress=False))
    pooled = build.build_index(root, profiles, build.IndexOptions(jobs=2, use_cache=False, progress=False))
    assert pool_spy == [2]
    assert serial.files == pooled.files and serial.diagnostics == pooled.diagnostics
    assert serial.stats.files_parsed == pooled.stats.files_parsed > 0


def _dying_work(task):
    """A worker that dies (like an OOM kill) on one file."""
    import os

    if task[0].endswith("alpha.py"):
        os._exit(1)
    return build._run_task(task, build._CONV, build._LIMITS)


def test_a_dead_worker_costs_time_not_facts(tmp_path, pool_spy, monkeypatch):
    from flowtrace.engines.profiles import select_profiles

    root = _copy("sglang_like", tmp_path)
    profiles = select_profiles(root, None)
    expected = build.build_index(root, profiles, build.IndexOptions(jobs=1, use_cache=False, progress=False))
    monkeypatch.setattr(build, "_work", _dying_work)
    got = build.build_index(root, profiles, build.IndexOptions(jobs=2, use_cache=False, progress=False))
    assert got.files == expected.files
    notes = [d for d in got.diagnostics if d not in expected.diagnostics]
    assert len(notes) == 1 and "worker process failed" in notes[0].reason

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
    """Count how often a pool of parse workers starts, and with how many workers."""
    starts = []
    original = build._Parser._start

    def start(self):
        starts.append(self.jobs)
        return original(self)

    monkeypatch.setattr(build._Parser, "_start", start)
    return starts


@pytest.mark.parametrize("engine", ENGINES)
def test_json_is_identical_cold_warm_serial_and_pooled(engine, tmp_path, pool_spy):
    root = _copy(engine, tmp_path)
    cache = tmp_path / "cache"
    serial, doc = _scan_json(root, "--no-cache", "--jobs", "1")
    assert pool_spy == [1], "--jobs 1 parses in one (killable) worker process"
    pooled, _ = _scan_json(root, "--no-cache", "--jobs", "3")
    assert pool_spy == [1, 3], "a multi-job cold scan starts exactly one pool"
    cold_cached, _ = _scan_json(root, "--cache-dir", str(cache), "--jobs", "2")
    warm, _ = _scan_json(root, "--cache-dir", str(cache), "--jobs", "2")
    warm_serial, _ = _scan_json(root, "--cache-dir", str(cache), "--jobs", "1")
    assert pool_spy == [1, 3, 2], "a warm scan has nothing to parse and starts no pool"
    assert serial == pooled == cold_cached == warm == warm_serial
    assert doc["models"], "the comparison must cover a non-empty model matrix"


@pytest.mark.parametrize("engine", ENGINES)
def test_facts_are_equal_in_a_pool_and_serially(engine, tmp_path, pool_spy):
    from flowtrace.engines.profiles import select_profiles

    root = _copy(engine, tmp_path)
    profiles = select_profiles(root, None)
    serial = build.build_index(root, profiles, build.IndexOptions(jobs=1, use_cache=False, progress=False))
    pooled = build.build_index(root, profiles, build.IndexOptions(jobs=2, use_cache=False, progress=False))
    assert pool_spy == [1, 2]
    assert serial.files == pooled.files and serial.diagnostics == pooled.diagnostics
    assert serial.stats.files_parsed == pooled.stats.files_parsed > 0


_RUN_TASK = build._run_task
_FLAG: list = []


def _dying_once(task, conv, limits):
    """A worker that dies (like an OOM kill) the first time it meets one file."""
    import os

    if task[0].endswith("alpha.py") and not os.path.exists(_FLAG[0]):
        open(_FLAG[0], "w").close()
        os._exit(1)
    return _RUN_TASK(task, conv, limits)


def test_a_dead_worker_costs_time_not_facts(tmp_path, pool_spy, monkeypatch):
    """The file a worker died under is retried once in a fresh worker: a one-off death (the
    OOM killer, a neighbour's doing) changes nothing in the result."""
    from flowtrace.engines.profiles import select_profiles

    root = _copy("sglang_like", tmp_path)
    profiles = select_profiles(root, None)
    expected = build.build_index(root, profiles, build.IndexOptions(jobs=1, use_cache=False, progress=False))
    _FLAG[:] = [str(tmp_path / "died")]
    monkeypatch.setattr(build, "_run_task", _dying_once)
    got = build.build_index(root, profiles, build.IndexOptions(jobs=2, use_cache=False, progress=False))
    assert (tmp_path / "died").exists(), "the worker must really have died once"
    assert got.files == expected.files
    assert got.diagnostics == expected.diagnostics

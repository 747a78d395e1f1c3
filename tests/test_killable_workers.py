"""A parse that hangs in native code, or crashes the parser, costs one file, never the scan.

The bad parses come from the parse test hook (``FLOWTRACE_TEST_PARSE_HOOK=1``): a file whose
first line is ``# flowtrace-test-hook: hang`` blocks signals and sleeps, as a parse stuck in
a native parser would (the in-process SIGALRM limit cannot fire); ``segv`` kills its
process with SIGSEGV, ``exit`` with ``os._exit``. Nothing here asserts a duration: the hang
would never end on its own, so the scan finishing at all is the proof that it was cut off.
"""

from __future__ import annotations

import os
import shutil

import pytest

from fixture_paths import SGLANG_LIKE
from flowtrace.index import workers
from flowtrace.index.build import IndexOptions, build_index
from flowtrace.index.parse import TEST_HOOK_ENV
from flowtrace.engines.profiles import select_profiles

MODELS = "sglang/srt/models"


def _tree(tmp_path, action: str | None):
    root = tmp_path / "tree"
    shutil.copytree(SGLANG_LIKE, root, ignore=shutil.ignore_patterns(".flowtrace_cache", "__pycache__"))
    if action is not None:
        # names a capture marker, so it goes to the full analysis
        (root / MODELS / "bad.py").write_text(
            f"# flowtrace-test-hook: {action}\n# layers_to_capture\nclass Bad:\n    pass\n"
        )
    return root


def _index(root, jobs, **kw):
    return build_index(
        root, select_profiles(root, None), IndexOptions(jobs=jobs, use_cache=False, progress=False, **kw)
    )


@pytest.mark.parametrize("jobs", [1, 2])
@pytest.mark.parametrize(
    "action, kind, words",
    [
        ("hang", "timeout", "the worker was killed"),
        ("segv", "internal", "killed by SIGSEGV"),
        ("exit", "internal", "exit status 70"),
    ],
)
def test_a_bad_parse_becomes_one_counted_diagnostic(tmp_path, monkeypatch, jobs, action, kind, words):
    expected = _index(_tree(tmp_path / "clean", None), 1)
    monkeypatch.setenv(TEST_HOOK_ENV, "1")
    # the limit applies to every file: wide enough that no fixture file meets it on a loaded
    # machine; only the hang (which would never end) does
    got = _index(_tree(tmp_path / "bad", action), jobs, timeout_s=4)
    bad = [d for d in got.diagnostics if d.file == f"{MODELS}/bad.py"]
    assert len(bad) == 1 and bad[0].kind == kind and words in bad[0].reason, bad
    assert got.stats.parse_errors == expected.stats.parse_errors + 1
    others = [f for f in got.files if f.path != f"{MODELS}/bad.py"]
    assert others == list(expected.files), "every other file keeps its facts"
    assert set(got.diagnostics) - set(bad) == set(expected.diagnostics)


def test_without_the_variable_the_hook_line_is_an_ordinary_comment(tmp_path, monkeypatch):
    monkeypatch.delenv(TEST_HOOK_ENV, raising=False)
    got = _index(_tree(tmp_path, "segv"), 1)
    (bad,) = [f for f in got.files if f.path == f"{MODELS}/bad.py"]
    assert [c.name for c in bad.classes] == ["Bad"] and not bad.diagnostics


def _die_the_first_time(task, flag_dir):
    flag = os.path.join(flag_dir, f"{task}.died")
    if not os.path.exists(flag):
        open(flag, "w").close()
        os._exit(1)
    return f"done {task}"


def test_a_worker_that_dies_once_is_replaced_and_its_task_retried(tmp_path):
    pool = workers.WorkerPool(2, _die_the_first_time, (str(tmp_path),), limit_s=0)
    tasks, got = ["a", "b", "c"], []
    try:
        while tasks or pool.in_flight:
            while tasks and pool.has_room():
                pool.submit(tasks.pop(0))
            got.extend(pool.wait(block=True))
    finally:
        pool.close()
    assert sorted(got) == [("a", "done a"), ("b", "done b"), ("c", "done c")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.died", "b.died", "c.died"]


def _always_die(task):
    os._exit(3)


def test_a_task_that_kills_every_worker_is_given_up_after_one_retry(tmp_path):
    pool = workers.WorkerPool(1, _always_die, (), limit_s=0)
    try:
        pool.submit("x")
        got = []
        while pool.in_flight:
            got.extend(pool.wait(block=True))
    finally:
        pool.close()
    assert got == [workers.Lost("x", "crash", "the parser crashed (exit status 3); not parsed")]

"""The console script ends its process without the interpreter's teardown (``flowtrace.cli.end_process``):
what ``sys.exit`` would do for the exit status, the atexit handlers and the streams, nothing more."""

from __future__ import annotations

import json
import subprocess
import sys

from fixture_paths import SGLANG_LIKE

RUN_WITH_A_FINALIZER = """
import atexit, sys

class Teardown:
    def __del__(self):
        sys.stdout.write("teardown\\n")
        sys.stdout.flush()

kept = Teardown()
atexit.register(lambda: print("atexit ran"))
sys.argv = ["flowtrace", *sys.argv[1:]]
from flowtrace.cli import run
run()
"""


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", RUN_WITH_A_FINALIZER, *args], capture_output=True, text=True)


def test_atexit_handlers_run_and_the_heap_is_not_torn_down():
    done = _run("--version")
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    assert lines[0].startswith("flowtrace") and lines[1:] == ["atexit ran"]  # no "teardown": no finalization


def test_exit_statuses_are_those_of_the_command():
    engine = str(SGLANG_LIKE)
    assert _run("check", engine, "--no-cache", "--jobs", "1").returncode == 1  # the fixture has errors
    missing = _run("scan", engine + "-missing")
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [f"flowtrace: error: {engine}-missing: no such file or directory"]


def test_a_long_output_is_flushed_whole():
    engine = str(SGLANG_LIKE)
    done = _run("scan", engine, "--no-cache", "--jobs", "1", "--format", "json")
    assert done.returncode == 0
    assert json.loads(done.stdout.split("atexit ran")[0])["models"]


def test_a_message_exit_goes_to_stderr_with_status_1():
    program = "from flowtrace.cli import end_process\nprint('out')\nend_process('went wrong')\n"
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (1, "out\n", "went wrong\n")

"""The scan command as a user meets it: formats, schema, exit codes, messages."""

from __future__ import annotations

import json
import subprocess
import sys

from click.testing import CliRunner

from fixture_paths import SGLANG_LIKE, VLLM_LIKE
from flowtrace.cli.main import main


def run(*args):
    return CliRunner().invoke(main, list(args))


def test_text_matrix_lists_registered_classes_with_locations():
    out = run("scan", str(SGLANG_LIKE), "--no-cache")
    assert out.exit_code == 0, out.output
    line = next(l for l in out.stdout.splitlines() if l.startswith("DeltaForCausalLM "))
    assert "inherited" in line and "plus_one" in line and "sglang/srt/models/alpha.py:59 (inherited)" in line
    assert "flowtrace: 33 files" in out.stderr  # summary goes to stderr (model_executor/ holds the runner; heta_vl.py)


def test_json_follows_the_public_schema():
    out = run("scan", str(VLLM_LIKE), "--format", "json", "--no-cache")
    doc = json.loads(out.stdout)
    assert doc["schema"] == "flowtrace.scan/1"
    assert doc["tool"]["name"] == "flowtrace" and doc["profiles"] == ["vllm"]
    assert set(doc["stats"]) >= {"files_total", "files_parsed", "parse_errors", "seconds"}
    model = next(m for m in doc["models"] if m["class"] == "LlamaForCausalLM")
    assert set(model) >= {"class", "qualname", "file", "line", "registered", "capture"}
    capture = model["capture"]
    assert capture["id_transform"] == "delegates" and capture["delegates_to"].endswith("LlamaModel")
    assert set(capture["setter"]) == {"qualname", "file", "line", "inherited"}
    assert capture["capture_site"]["point"] == "input" and capture["capture_site"]["mechanism"] == "helper"
    for f in doc["findings"]:
        assert set(f) >= {"rule", "severity", "file", "line", "message", "symbol", "fingerprint"}
    assert [m["qualname"] for m in doc["models"]] == sorted(m["qualname"] for m in doc["models"])
    assert all(not m["file"].startswith("/") for m in doc["models"])


def test_missing_path_and_bad_profile_exit_2_without_traceback(tmp_path):
    missing = run("scan", str(tmp_path / "nope"))
    assert missing.exit_code == 2 and "no such file or directory" in missing.output
    profile = run("scan", str(SGLANG_LIKE), "--profile", "tensorrt")
    assert profile.exit_code == 2 and "unknown profile 'tensorrt'" in profile.output
    for out in (missing, profile):
        assert "Traceback" not in out.output


def test_output_file_and_forced_profile(tmp_path):
    target = tmp_path / "out" / "scan.json"
    out = run("scan", str(SGLANG_LIKE), "--profile", "sglang", "--format", "json", "-o", str(target), "--no-cache")
    assert out.exit_code == 0 and out.stdout == ""
    assert json.loads(target.read_text())["profiles"] == ["sglang"]


def test_python_dash_m_and_help_do_not_import_torch():
    code = "import sys, runpy; sys.argv=['flowtrace','scan','%s','--no-cache']; " % SGLANG_LIKE
    code += (
        "\n"
        "try:\n"
        "    runpy.run_module('flowtrace', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "assert 'torch' not in sys.modules, 'scan imported torch'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "AlphaForCausalLM" in done.stdout
    helped = subprocess.run([sys.executable, "-m", "flowtrace", "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and "scan" in helped.stdout and "compat" in helped.stdout

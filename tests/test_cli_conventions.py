"""The command line behaves like ruff's and Semgrep's: what a user of those tools expects.

Each test is one defect a new user met (issue 27), run through click's runner or a
subprocess of the installed script.
"""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from flowtrace import DISTRIBUTION, __version__
from flowtrace.cli import main

REPO = Path(__file__).resolve().parents[1]


def test_version_names_the_distribution_not_the_unrelated_flowtrace_on_the_index():
    res = CliRunner().invoke(main, ["--version"])
    assert res.exit_code == 0
    assert res.output.strip() == f"flowtrace (flowtrace-llm {__version__})"
    name = re.search(r'^name = "([^"]+)"', (REPO / "pyproject.toml").read_text(encoding="utf-8"), re.M)
    assert name is not None and name.group(1) == DISTRIBUTION == "flowtrace-llm"


def test_every_documented_install_names_the_distribution():
    """A bare `pip install flowtrace...` installs someone else's project."""
    bare = re.compile(r"pip install ['\"]?flowtrace(?![-\w])")
    for rel in (
        "README.md",
        "docs/ci.md",
        "action.yml",
        ".pre-commit-hooks.yaml",
        "flowtrace/probe/errors.py",
        "flowtrace/probe/draft.py",
        "flowtrace/probe/cli.py",
    ):
        text = (REPO / rel).read_text(encoding="utf-8")
        assert not bare.search(text), f"{rel}: {bare.search(text).group(0)!r}"
    docs = (REPO / "docs" / "ci.md").read_text(encoding="utf-8") + (REPO / ".pre-commit-hooks.yaml").read_text(
        encoding="utf-8"
    )
    assert "rev: v0.1.0" not in docs  # no such tag exists


def test_the_license_file_is_the_one_pyproject_declares():
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert 'license = "Apache-2.0"' in pyproject and 'license-files = ["LICENSE"]' in pyproject
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    # the full text
    assert "END OF TERMS AND CONDITIONS" in text and "9. Accepting Warranty or Additional Liability." in text


# --- conventions of ruff / Semgrep (issue 27, item 3) -------------------------------------

import shutil  # noqa: E402

import pytest  # noqa: E402

from fixture_paths import SGLANG_LIKE  # noqa: E402

FAST = ("--no-cache", "-j", "1")


def run(*args, **kw):
    return CliRunner().invoke(main, [str(a) for a in args], **kw)


@pytest.fixture()
def engine(tmp_path):
    tree = tmp_path / "repo" / "python" / "engine"
    shutil.copytree(SGLANG_LIKE, tree, ignore=shutil.ignore_patterns(".flowtrace_cache", "__pycache__"))
    return tree


def test_scan_with_html_prints_findings_and_the_report_not_the_matrix(tmp_path):
    report = tmp_path / "r.html"
    res = run("scan", SGLANG_LIKE, *FAST, "--html", report)
    assert res.exit_code == 0, res.output
    assert "class " not in res.stdout and "findings (" in res.stdout  # no matrix header
    assert f"flowtrace: wrote {report}" in res.stderr and report.is_file()
    with_matrix = run("scan", SGLANG_LIKE, *FAST, "--html", report, "--matrix")
    assert "AlphaForCausalLM" in with_matrix.stdout and "id transform" in with_matrix.stdout


def test_config_is_found_upward_from_a_subfolder(engine):
    repo = engine.parents[1]
    (repo / ".git").mkdir()  # the repository boundary the search stops at
    (repo / "pyproject.toml").write_text('[tool.flowtrace]\nselect = ["FT010"]\n', encoding="utf-8")
    res = run("check", engine, *FAST, "--output-format", "concise", "--exit-zero")
    rules = {line.split(": ")[1].split()[0] for line in res.stdout.splitlines() if line}
    assert rules == {"FT010"}, res.stdout
    shown = run("check", engine, "--show-settings")
    assert f"config file: {(repo / 'pyproject.toml').resolve()}" in shown.stdout and "select: FT010" in shown.stdout


def test_config_file_with_top_level_keys_is_honoured_and_a_table_less_pyproject_is_an_error(engine, tmp_path):
    own = tmp_path / "flowtrace.toml"
    own.write_text('select = ["FT002"]\n', encoding="utf-8")
    res = run("check", engine, *FAST, "--config", own, "--output-format", "concise", "--exit-zero")
    assert {line.split(": ")[1].split()[0] for line in res.stdout.splitlines() if line} == {"FT002"}, res.stdout
    bare = tmp_path / "pyproject.toml"
    bare.write_text('[project]\nname = "x"\n', encoding="utf-8")
    res = run("scan", engine, *FAST, "--config", bare)
    assert res.exit_code == 2 and "no [tool.flowtrace] table" in res.stderr


def test_quiet_verbose_color_and_statistics():
    quiet = run("check", SGLANG_LIKE, *FAST, "-q", "--exit-zero")
    assert quiet.stderr == "" and quiet.stdout
    loud = run("scan", SGLANG_LIKE, *FAST, "-v")
    assert "flowtrace: profile(s) sglang (detected)" in loud.stderr
    colour = run("check", SGLANG_LIKE, *FAST, "--color", "always", "--output-format", "concise", "--exit-zero")
    assert "\x1b[" in colour.stdout and "error" in colour.stdout
    plain = run("check", SGLANG_LIKE, *FAST, "--color", "never", "--output-format", "concise", "--exit-zero")
    assert "\x1b[" not in plain.stdout and "[error]" in plain.stdout
    stats = run("check", SGLANG_LIKE, *FAST, "--statistics", "--exit-zero")
    counted = {line.split()[1]: int(line.split()[0]) for line in stats.stdout.splitlines()}
    listed = [line.split(": ")[1].split()[0] for line in plain.stdout.splitlines() if line]
    assert counted == {rule: listed.count(rule) for rule in set(listed)}


def test_default_path_is_the_working_folder_and_output_file_is_an_alias(engine, tmp_path, monkeypatch):
    monkeypatch.chdir(engine)
    out = tmp_path / "findings.sarif"
    res = run("check", *FAST, "--output-format", "sarif", "--output-file", out, "--exit-zero")
    assert res.exit_code == 0, res.output
    assert out.read_text(encoding="utf-8").lstrip().startswith("{")
    scan = run("scan", *FAST, "--output-format", "concise")
    # relative to the working folder
    assert scan.exit_code == 0 and "sglang/srt/models/epsilon.py:23: FT002" in scan.stdout


def test_scan_and_check_take_the_same_format_names():
    for fmt in ("text", "full", "concise", "json", "json-lines", "sarif", "github", "html"):
        for command in ("scan", "check"):
            res = run(
                command, SGLANG_LIKE, *FAST, "--output-format", fmt, *(["--exit-zero"] if command == "check" else [])
            )
            assert res.exit_code == 0, (command, fmt, res.output)


def test_unwritable_output_is_one_line_exit_2(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    for command in ("scan", "check"):
        res = run(command, SGLANG_LIKE, *FAST, "-o", blocker / "out.txt")
        assert res.exit_code == 2, res.output
        assert (
            res.stderr.startswith(f"flowtrace: error: cannot write {blocker / 'out.txt'}: ")
            and "Traceback" not in res.output
        )


def test_scan_and_check_agree_on_a_non_python_file():
    readme = REPO / "README.md"
    answers = {command: run(command, readme) for command in ("scan", "check")}
    for res in answers.values():
        assert (
            res.exit_code == 2
            and res.stderr.strip()
            == f"flowtrace: error: no Python engine code in {readme}: not a Python file (give an engine checkout, a .py"
            " file or pypi:NAME==VERSION)"
        )


def test_zero_layers_is_named_as_such():
    res = run("trace", SGLANG_LIKE, "-m", "AlphaForCausalLM", "-L", "0", *FAST)
    assert res.exit_code == 2 and "the target needs at least one decoder layer" in res.stderr


def test_ctrl_c_is_interrupted_and_exit_130_for_every_command(monkeypatch):
    import flowtrace.lint.runner as runner
    import flowtrace.api as api

    def interrupt(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "run_check", interrupt)
    monkeypatch.setattr(api, "scan", interrupt)
    for args in (("scan", SGLANG_LIKE), ("check", SGLANG_LIKE), ("graph", SGLANG_LIKE)):
        res = run(*args)
        assert res.exit_code == 130 and res.stderr.strip() == "flowtrace: interrupted", (args, res.output)


UNPLACED_ENGINE = """\
class MForCausalLM:
    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.model.layers_to_capture = [i + 1 for i in layer_ids]


class NForCausalLM:
    def set_aux_hidden_state_layers(self, layers):
        self.model.aux_hidden_state_layers = layers
"""


def test_an_unrecognised_layout_says_which_profiles_were_applied(tmp_path):
    # engine code (two engines' setters, one each: a tie by content) outside every detect path
    (tmp_path / "model.py").write_text(UNPLACED_ENGINE, encoding="utf-8")
    res = run("scan", tmp_path, *FAST)
    assert res.exit_code == 0, res.output
    assert (
        f"flowtrace: warning: no known engine layout under {tmp_path}" in res.stderr
        and "applied every profile:" in res.stderr
    )
    # no engine code at all is not a layout question: refused, as check refuses it
    (tmp_path / "model.py").write_text("class M:\n    pass\n", encoding="utf-8")
    res = run("scan", tmp_path, *FAST)
    assert res.exit_code == 2 and "no engine code" in res.stderr


# --- hygiene (issue 27, item 5) ----------------------------------------------------------


def test_the_test_setup_leaves_no_folder_in_the_temp_dir(tmp_path):
    import os
    import subprocess
    import sys

    temp = tmp_path / "temp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp)}
    subprocess.run(
        [sys.executable, "-c", "import conftest, os; assert os.listdir(os.environ['TMPDIR'])"],
        cwd=REPO / "tests",
        env=env,
        check=True,
    )
    assert list(temp.iterdir()) == []  # the cache-key folder is removed when the run ends


def test_the_real_engine_marker_says_what_the_readme_says():
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    marker = re.search(r'"real_engine: ([^"]+)"', pyproject)
    assert marker is not None and "FLOWTRACE_REAL_ENGINES=DIR" in marker.group(1) and "NAME-VERSION" in marker.group(1)
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert (
        "FLOWTRACE_REAL_ENGINES=DIR python -m pytest -m real_engine" in readme
        and "one `NAME-VERSION` folder per release" in readme
    )


def test_no_profile_speaks_of_a_libcst_analysis():
    """The index parses with the stdlib ast; libcst is used only by `fix`."""
    for profile in (REPO / "rules").rglob("*.toml"):
        assert "libcst" not in profile.read_text(encoding="utf-8"), profile


def test_also_write_gives_several_formats_from_one_run(tmp_path):
    res = run(
        "check",
        SGLANG_LIKE,
        *FAST,
        "--exit-zero",
        "--output-format",
        "concise",
        "--also-write",
        f"sarif={tmp_path / 'f.sarif'}",
        "--also-write",
        f"json={tmp_path / 'f.json'}",
    )
    assert res.exit_code == 0, res.output
    import json

    doc = json.loads((tmp_path / "f.json").read_text(encoding="utf-8"))
    sarif = json.loads((tmp_path / "f.sarif").read_text(encoding="utf-8"))
    assert (
        len(doc["findings"])
        == len(sarif["runs"][0]["results"])
        == len([line for line in res.stdout.splitlines() if line])
    )
    bad = run("check", SGLANG_LIKE, "--also-write", "yaml=x.yaml")
    assert bad.exit_code == 2 and bad.stderr.startswith(
        "flowtrace: error: --also-write 'yaml=x.yaml': expected FORMAT=FILE"
    )


def test_several_paths_are_checked_as_one_tree_and_only_they(engine, monkeypatch):
    models = engine / "sglang" / "srt" / "models"
    monkeypatch.chdir(engine)
    res = run(
        "check",
        "sglang/srt/models/epsilon.py",
        "sglang/srt/models/alpha.py",
        *FAST,
        "--output-format",
        "concise",
        "--exit-zero",
    )
    assert res.exit_code == 0, res.output
    files = {line.split(":")[0] for line in res.stdout.splitlines() if line}
    assert (
        files <= {"sglang/srt/models/epsilon.py", "sglang/srt/models/alpha.py"}
        and "sglang/srt/models/epsilon.py" in files
    )
    assert "sglang/srt/models/epsilon.py:23: FT002" in res.stdout  # as when the whole tree is checked
    whole = run("check", engine, *FAST, "--output-format", "concise", "--exit-zero")
    assert "sglang/srt/models/gamma.py" in whole.stdout and "gamma.py" not in res.stdout
    scan = run("scan", models / "epsilon.py", models / "alpha.py", *FAST, "--format", "json")
    import json

    # relative to the common folder
    assert {m["file"] for m in json.loads(scan.stdout)["models"]} == {"epsilon.py", "alpha.py"}

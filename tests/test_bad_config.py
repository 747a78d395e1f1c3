"""Bad configuration is one clear line naming the file and the problem, and exit 2.

Covers the target/draft ``config.json`` of compat and trace, the engine and training
profiles (``FLOWTRACE_RULES`` pointed at a broken copy of ``rules/``), ``[tool.flowtrace]``
in the scanned tree's ``pyproject.toml``, and unknown rule codes.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from fixture_paths import SGLANG_LIKE
from flowtrace.cli.main import main
from flowtrace.engines.profiles import rules_directory

TARGET = {"architectures": ["AlphaForCausalLM"], "num_hidden_layers": 32, "hidden_size": 64}
DRAFT = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "target_hidden_size": 64,
    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 2, 30]},
}


def run(*args, env=None):
    return CliRunner(env=env).invoke(main, [str(a) for a in args])


def one_line_error(res, *words):
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and "internal error" not in res.output, res.output
    lines = [line for line in res.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("flowtrace: error:"), res.stderr
    for word in words:
        assert word in res.stderr, (word, res.stderr)


def write(path: Path, content) -> Path:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


BAD_TARGETS = {
    "truncated": '{"architectures": ["AlphaForCausalLM"],',
    "empty": "",
    "binary": b"\xff\xfe\x00\x01",
    "not-an-object": [1, 2],
    "no-architectures": {"num_hidden_layers": 32},
    "architectures-not-a-list": dict(TARGET, architectures="AlphaForCausalLM"),
    "architectures-of-null": dict(TARGET, architectures=[None]),
    "no-layers": {"architectures": ["AlphaForCausalLM"]},
    "layers-a-string": dict(TARGET, num_hidden_layers="32"),
    "layers-negative": dict(TARGET, num_hidden_layers=-4),
    "layers-a-bool": dict(TARGET, num_hidden_layers=True),
    "layers-a-float": dict(TARGET, num_hidden_layers=32.5),
    "layers-absurd": dict(TARGET, num_hidden_layers=10**11),
    "deeply-nested": '{"a":' * 50_000,
}


@pytest.mark.parametrize("case", sorted(BAD_TARGETS))
def test_a_bad_target_config_is_one_line(tmp_path, case):
    target = write(tmp_path / "target.json", BAD_TARGETS[case])
    draft = write(tmp_path / "draft.json", DRAFT)
    res = run("compat", SGLANG_LIKE, "--target-config", target, "--draft-config", draft, "--no-cache", "--jobs", "1")
    one_line_error(res, "target.json", "target config")
    res = run("trace", SGLANG_LIKE, "-m", "AlphaForCausalLM", "--target-config", target, "--no-cache", "--jobs", "1")
    one_line_error(res, "target.json")


BAD_DRAFTS = {
    "truncated": '{"eagle_config": {',
    "binary": b"\x80\x81",
    "not-an-object": "[]",
    "ids-a-string": {"eagle_config": {"eagle_aux_hidden_state_layer_ids": "1,2,3"}},
    "ids-of-null": {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, None]}},
    "ids-of-float": {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1.5, 2]}},
    "ids-of-bool": {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [True, 2]}},
    "deeply-nested": "[" * 50_000,
}


@pytest.mark.parametrize("case", sorted(BAD_DRAFTS))
def test_a_bad_draft_config_is_one_line(tmp_path, case):
    target = write(tmp_path / "target.json", TARGET)
    draft = write(tmp_path / "draft.json", BAD_DRAFTS[case])
    res = run("compat", SGLANG_LIKE, "--target-config", target, "--draft-config", draft, "--no-cache", "--jobs", "1")
    one_line_error(res, "draft.json")


def test_missing_configs_and_a_folder_without_one(tmp_path):
    draft = write(tmp_path / "draft.json", DRAFT)
    (tmp_path / "empty").mkdir()
    for target in (tmp_path / "nope.json", tmp_path / "empty"):
        res = run("compat", SGLANG_LIKE, "--target-config", target, "--draft-config", draft, "--no-cache")
        one_line_error(res, "not found")


def test_odd_but_usable_configs_still_give_a_verdict(tmp_path):
    """Extra or mistyped optional fields are ignored, not fatal."""
    target = write(tmp_path / "target.json", dict(TARGET, hidden_size="wide", text_config=5, extra={"x": [1]}))
    for draft_doc in (dict(DRAFT, target_hidden_size="x"), {"eagle_config": [1]}):
        draft = write(tmp_path / "draft.json", draft_doc)
        res = run(
            "compat", SGLANG_LIKE, "--target-config", target, "--draft-config", draft, "--no-cache", "--jobs", "1"
        )
        assert res.exit_code in (0, 1), res.output
        assert "Traceback" not in res.output
    # an id no layer of the 32-layer target can mean is an input error naming the valid range
    draft = write(tmp_path / "draft.json", {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [10**30, 2]}})
    res = run("compat", SGLANG_LIKE, "--target-config", target, "--draft-config", draft, "--no-cache", "--jobs", "1")
    one_line_error(res, "outside -1..31")


# -- profiles -------------------------------------------------------------------------------------


def broken_rules(tmp_path: Path, relative: str, edit) -> Path:
    rules = tmp_path / "rules"
    shutil.copytree(rules_directory(), rules)
    target = rules / relative
    if callable(edit):
        edit(target)
    else:
        write(target, edit)
    return rules


def sub(pattern: str, replacement: str):
    def edit(path: Path) -> None:
        text = path.read_text()
        new = re.sub(pattern, replacement, text, count=1, flags=re.M)
        assert new != text, pattern
        path.write_text(new)

    return edit


BAD_ENGINE_PROFILES = {
    "toml-syntax": (lambda p: p.write_text(p.read_text() + "\ngarbage [\n"), "not valid TOML"),
    "binary": (b"\xff\xfe[engine]", "not valid TOML"),
    "empty": ("", "missing table [engine]"),
    "wrong-type": (sub(r"^markers = .*$", "markers = 5"), "markers must be a list"),
    "non-string-item": (sub(r"^markers = \[", "markers = [3, "), "expected a list of strings"),
    "unknown-key": (
        lambda p: p.write_text(p.read_text().replace("[engine]\n", "[engine]\nbogus = 1\n", 1)),
        "unknown key(s) bogus",
    ),
    "bad-regex": (sub(r"^dict_name_pattern = .*$", 'dict_name_pattern = "([unclosed"'), "dict_name_pattern"),
}


@pytest.mark.parametrize("case", sorted(BAD_ENGINE_PROFILES))
def test_a_malformed_engine_profile_is_one_line_naming_it(tmp_path, case):
    edit, words = BAD_ENGINE_PROFILES[case]
    profile = "engines/vllm.toml" if case == "bad-regex" else "engines/sglang.toml"
    rules = broken_rules(tmp_path, profile, edit)
    env = {"FLOWTRACE_RULES": str(rules)}
    target = write(tmp_path / "target.json", TARGET)
    draft = write(tmp_path / "draft.json", DRAFT)
    for args in (
        ("scan", SGLANG_LIKE),
        ("check", SGLANG_LIKE),
        ("graph", SGLANG_LIKE),
        ("trace", SGLANG_LIKE, "-m", "AlphaForCausalLM", "-L", "32"),
        ("compat", SGLANG_LIKE, "--target-config", target, "--draft-config", draft),
    ):
        res = run(*args, "--no-cache", "--jobs", "1", env=env)
        one_line_error(res, Path(profile).name, words)


def test_missing_or_unreadable_profile_files(tmp_path):
    rules = broken_rules(tmp_path, "engines/extra.toml", "")
    (rules / "engines" / "extra.toml").unlink()
    (rules / "engines" / "dir.toml").mkdir()
    one_line_error(run("scan", SGLANG_LIKE, "--no-cache", env={"FLOWTRACE_RULES": str(rules)}), "dir.toml")
    (rules / "engines" / "dir.toml").rmdir()
    (rules / "engines" / "dangling.toml").symlink_to(tmp_path / "nowhere.toml")
    one_line_error(run("scan", SGLANG_LIKE, "--no-cache", env={"FLOWTRACE_RULES": str(rules)}), "dangling.toml")
    one_line_error(
        run("scan", SGLANG_LIKE, "--no-cache", env={"FLOWTRACE_RULES": str(tmp_path / "no-rules")}),
        "no engine profiles",
    )


BAD_TRAINING = {
    "toml-syntax": (lambda p: p.write_text(p.read_text() + "\ngarbage [\n"), "specforge.toml"),
    "bad-meaning": (sub(r"^meaning = .*$", "meaning = 7"), "meaning must be one of"),
    "missing-key": (sub(r"^meaning = .*$", ""), "specforge.toml"),
    "default-ids-code": (None, "cannot evaluate"),  # the edit needs tmp_path: made in the test
}


@pytest.mark.parametrize("case", sorted(BAD_TRAINING))
def test_a_malformed_training_profile_is_one_line(tmp_path, case):
    edit, words = BAD_TRAINING[case]
    sentinel = tmp_path / "executed"
    if case == "default-ids-code":
        edit = sub(r"^default_ids = .*$", f"default_ids = \"__import__('os').system('touch {sentinel}')\"")
    rules = broken_rules(tmp_path, "training/specforge.toml", edit)
    target = write(tmp_path / "target.json", TARGET)
    # no ids: default_ids is evaluated
    draft = write(tmp_path / "draft.json", {"architectures": ["LlamaForCausalLMEagle3"], "eagle_config": {}})
    res = run(
        "compat",
        SGLANG_LIKE,
        "--target-config",
        target,
        "--draft-config",
        draft,
        "--trained-with",
        "specforge",
        "--no-cache",
        env={"FLOWTRACE_RULES": str(rules)},
    )
    one_line_error(res, words)
    assert not sentinel.exists()


# -- [tool.flowtrace] and rule codes -------------------------------------------------------------------


BAD_PYPROJECT = {
    "toml-syntax": ("[tool.flowtrace\nselect = 1\n", "invalid TOML"),
    "binary": (b"\xff\xfe[tool.flowtrace]\n", "pyproject.toml"),
    "not-a-table": ("[tool]\nflowtrace = 5\n", "must be a table"),
    "wrong-type": ("[tool.flowtrace]\nselect = 1\n", "select"),
    "unknown-key": ("[tool.flowtrace]\nbogus = 1\n", "unknown key 'bogus'"),
    "unknown-code": ('[tool.flowtrace]\nselect = ["FT999"]\n', "unknown rule code 'FT999'"),
    "bad-fail-on": ('[tool.flowtrace]\nfail-on = "catastrophic"\n', "fail-on"),
    "bad-exclude": ("[tool.flowtrace]\nexclude = [1]\n", "exclude"),
    "slow-exclude": ('[tool.flowtrace]\nexclude = ["a*a*a*a*a*a*a*a*X"]\n', "too many wildcards"),
    "invalid-exclude": ('[tool.flowtrace]\nexclude = ["!"]\n', "invalid pattern"),
    "slow-per-file-ignores": (
        '[tool.flowtrace.per-file-ignores]\n"a*a*a*a*a*a*a*a*X" = ["FT001"]\n',
        "too many wildcards",
    ),
    "bad-profile": ('[tool.flowtrace]\nprofile = "tensorrt"\n', "unknown profile"),
}


@pytest.mark.parametrize("case", sorted(BAD_PYPROJECT))
def test_a_malformed_tool_flowtrace_table_is_one_line(tmp_path, case):
    content, words = BAD_PYPROJECT[case]
    root = tmp_path / "tree"
    shutil.copytree(SGLANG_LIKE, root, ignore=shutil.ignore_patterns(".flowtrace_cache", "__pycache__"))
    write(root / "pyproject.toml", content)
    one_line_error(run("check", root, "--no-cache", "--jobs", "1"), "pyproject.toml", words)
    # The same file given explicitly, and --isolated ignoring it.
    one_line_error(run("check", root, "--config", root / "pyproject.toml", "--no-cache", "--jobs", "1"), words)
    assert run("check", root, "--isolated", "--no-cache", "--jobs", "1").exit_code in (0, 1)


def test_a_pyproject_that_is_not_a_file_is_ignored_or_refused_cleanly(tmp_path):
    root = tmp_path / "tree"
    shutil.copytree(SGLANG_LIKE, root, ignore=shutil.ignore_patterns(".flowtrace_cache", "__pycache__"))
    (root / "pyproject.toml").symlink_to(tmp_path / "nowhere.toml")
    res = run("check", root, "--no-cache", "--jobs", "1")
    assert res.exit_code in (0, 1, 2) and "Traceback" not in res.output and "internal error" not in res.output


@pytest.mark.parametrize(
    "args",
    [
        ("check", SGLANG_LIKE, "--select", "FT999"),
        ("check", SGLANG_LIKE, "--ignore", "XYZ"),
        ("check", SGLANG_LIKE, "--extend-select", "FT0000"),
        ("explain", "FT999"),
        ("check", SGLANG_LIKE, "--config", "/nonexistent/pyproject.toml"),
        ("check", SGLANG_LIKE, "--baseline", "/nonexistent/baseline.json"),
    ],
    ids=["select", "ignore", "extend-select", "explain", "config", "baseline"],
)
def test_unknown_rule_codes_and_missing_files_exit_2(args):
    res = run(*args, *(("--no-cache",) if args[0] == "check" else ()))
    one_line_error(res)


@pytest.mark.parametrize(
    "content",
    ["{", "[1]", '{"schema": "flowtrace.baseline/1", "findings": [1]}', "[" * 50_000, b"\xff"],
    ids=["truncated", "list", "wrong-shape", "deep", "binary"],
)
def test_a_bad_baseline_is_one_line(tmp_path, content):
    baseline = write(tmp_path / "baseline.json", content)
    one_line_error(run("check", SGLANG_LIKE, "--baseline", baseline, "--no-cache", "--jobs", "1"), "baseline.json")

"""The CI lint contract of ``flowtrace check`` (exit codes, selection, suppression, baseline, config).

Runs against copies of the fixture engines. Where a deterministic finding is needed, a
test-only rule (FT999, ``probe``) that reports chosen fixture classes is registered for the
duration of one test; everything else is asserted without knowing what the real rules find.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import ClassVar

import click
import pytest
from click.testing import CliRunner

from flowtrace.lint.runner import SelectionLayer, resolve_selection, run_check
from flowtrace.model.consequence import Consequence
from flowtrace.checks.base import SEVERITIES, Finding, Rule
from flowtrace.cli.check import check, explain, rules
from flowtrace.model.facts import Location

FIXTURES = Path(__file__).parent / "fixtures" / "engines"
REPO = Path(__file__).resolve().parents[1]
FAST = ["--jobs", "1", "--no-cache"]  # a shared fact cache replaces --no-cache below (content-keyed, so edits are safe)


@pytest.fixture(scope="module", autouse=True)
def _shared_fact_cache(tmp_path_factory):
    FAST[:] = ["--jobs", "1", "--cache-dir", str(tmp_path_factory.mktemp("facts"))]


def cli() -> click.Group:
    return click.Group("flowtrace", commands={"check": check, "rules": rules, "explain": explain})


def invoke(*args: str):
    return CliRunner().invoke(cli(), [str(a) for a in args], catch_exceptions=False)


def run_json(path, *args: str):
    res = invoke("check", path, *FAST, "--output-format", "json", *args)
    assert res.exit_code in (0, 1), res.stderr
    return res.exit_code, json.loads(res.stdout)


def copy_engine(tmp_path: Path, name: str = "sglang_like") -> Path:
    dest = tmp_path / name
    shutil.copytree(FIXTURES / name, dest, ignore=shutil.ignore_patterns(".flowtrace_cache", "__pycache__"))
    return dest


def add_comment(path: Path, line: int, comment: str) -> None:
    lines = path.read_text().splitlines(keepends=True)
    lines[line - 1] = lines[line - 1].rstrip("\n") + f"  {comment}\n"
    path.write_text("".join(lines))


def append_lines(path: Path, *new: str) -> list[int]:
    """Append statements at the end of a module; their 1-based line numbers."""
    text = path.read_text()
    if not text.endswith("\n"):
        text += "\n"
    first = len(text.splitlines()) + 1
    path.write_text(text + "".join(line + "\n" for line in new))
    return list(range(first, first + len(new)))


def key(f: dict) -> tuple:
    return (f["rule"], f["file"], f["line"], f["message"])


@pytest.fixture
def probe():
    """FT999: a warning on every fixture class named in ``targets`` (line-independent fingerprint)."""

    class ProbeRule(Rule):
        code = "FT999"
        name = "test-probe"
        consequence = Consequence.FRAGILE  # a warning
        summary = "Test-only rule."
        rationale = "Makes the contract tests deterministic."
        fix = "None needed."
        targets: ClassVar[set[str]] = {"AlphaForCausalLM", "BetaForCausalLM"}

        def check(self, result):
            for ff in result.files:
                for cls in ff.classes:
                    if cls.name in type(self).targets:
                        yield self.finding(cls.location, f"probe hit {cls.name}", cls.qualname, cls.name)

    try:
        yield ProbeRule
    finally:
        Rule.registry.pop("FT999", None)


@pytest.fixture
def engine(tmp_path):
    return copy_engine(tmp_path)


# --------------------------------------------------------------------------- exit codes


def test_exit_codes_follow_fail_on(engine, probe):
    assert invoke("check", engine, *FAST, "--select", "FT999").exit_code == 1  # two warnings
    assert invoke("check", engine, *FAST, "--select", "FT999", "--fail-on", "error").exit_code == 0
    assert invoke("check", engine, *FAST, "--select", "FT999", "--fail-on", "info").exit_code == 1
    assert invoke("check", engine, *FAST, "--select", "FT999", "--exit-zero").exit_code == 0
    probe.targets = set()
    res = invoke("check", engine, *FAST, "--select", "FT999")
    assert res.exit_code == 0 and res.stdout == ""


def test_exit_code_agrees_with_reported_severities_for_every_fail_level():
    """Rule-agnostic: exit 1 exactly when some reported finding is at or above --fail-on."""
    for name in ("sglang_like", "vllm_like"):
        for level in SEVERITIES:
            code, doc = run_json(FIXTURES / name, "--fail-on", level)
            worst = max((SEVERITIES.index(f["severity"]) for f in doc["findings"]), default=-1)
            assert code == (1 if worst >= SEVERITIES.index(level) else 0), (name, level)
            assert doc["summary"]["exit_code"] == code


def test_missing_path_is_exit_2_with_one_line(tmp_path):
    res = invoke("check", tmp_path / "nope", *FAST)
    assert res.exit_code == 2
    assert res.stdout == ""
    assert len(res.stderr.strip().splitlines()) == 1 and "nope" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("shape", ["empty folder", "wrong folder", "single file"])
def test_path_without_engine_code_is_exit_2_not_green(tmp_path, shape):
    """An empty folder, a folder of unrelated Python and a lone file are usage errors (one line),
    never "0 findings" with exit 0."""
    target = tmp_path / "target"
    target.mkdir()
    if shape != "empty folder":
        (target / "tool.py").write_text("import os\n\n\ndef main():\n    return os.getcwd()\n")
    if shape == "single file":
        target = target / "tool.py"
    res = invoke("check", target, *FAST)
    assert res.exit_code == 2 and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("flowtrace: error: ") and "no engine code" in lines[0]
    assert ("no Python files" in lines[0]) == (shape == "empty folder")


def test_unknown_codes_are_usage_errors(engine):
    for option in ("--select", "--ignore", "--extend-select"):
        res = invoke("check", engine, *FAST, option, "FT0,XY123")
        assert res.exit_code == 2, option
        assert "XY123" in res.stderr and option in res.stderr
        assert len(res.stderr.strip().splitlines()) == 1


def test_crashing_rule_is_internal_error_exit_2(engine):
    class Crash(Rule):
        code = "FT998"
        name = "test-crash"
        summary = rationale = fix = "test"

        def check(self, result):
            raise RuntimeError("boom\nsecond line")
            yield  # pragma: no cover

    try:
        res = CliRunner().invoke(cli(), ["check", str(engine), *FAST, "--select", "FT998"])
    finally:
        Rule.registry.pop("FT998", None)
    assert res.exit_code == 2
    assert res.stderr.startswith("flowtrace: error: internal error:") and "boom" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr


def test_parse_errors_alone_follow_their_rule_severity(engine):
    (engine / "sglang" / "srt" / "models" / "broken.py").write_text("def set_eagle3_layers_to_capture(:\n    pass\n")
    code, doc = run_json(engine, "--select", "FT015")
    assert doc["findings"], "the unparsable file is reported"
    worst = max(SEVERITIES.index(f["severity"]) for f in doc["findings"])
    assert code == (1 if worst >= SEVERITIES.index("warning") else 0)
    code, _ = run_json(engine, "--select", "FT015", "--fail-on", "info")
    assert code == 1


# --------------------------------------------------------------------------- selection


def test_ignore_and_select_remove_exactly_the_chosen_codes():
    path = FIXTURES / "sglang_like"
    _, full = run_json(path)
    codes = sorted({f["rule"] for f in full["findings"]})
    if not codes:
        pytest.skip("no rule reports anything on the fixture yet")
    target = codes[0]
    _, ignored = run_json(path, "--ignore", target)
    assert sorted(map(key, ignored["findings"])) == sorted(key(f) for f in full["findings"] if f["rule"] != target)
    _, selected = run_json(path, "--select", target)
    assert sorted(map(key, selected["findings"])) == sorted(key(f) for f in full["findings"] if f["rule"] == target)
    _, by_prefix = run_json(path, "--select", "FT0")
    assert {f["rule"] for f in by_prefix["findings"]} == {c for c in codes if c.startswith("FT0")}


def test_selectors_are_comma_separated_and_repeatable(engine, probe):
    probe.targets = {"AlphaForCausalLM"}
    _, a = run_json(engine, "--select", "FT999,FT017")
    _, b = run_json(engine, "--select", "FT999", "--select", "ft017")
    assert a["findings"] == b["findings"]
    assert {f["rule"] for f in a["findings"]} <= {"FT999", "FT017"}
    assert "FT999" in {f["rule"] for f in a["findings"]}
    _, c = run_json(engine, "--select", "FT017", "--extend-select", "FT999")
    assert c["findings"] == a["findings"]


def test_selection_layers_like_ruff():
    codes = ("FT001", "FT002", "FT010", "FT011")
    assert resolve_selection(codes, []) == set(codes)
    # a more specific ignore beats a shorter select; an equal one wins the tie
    assert resolve_selection(codes, [SelectionLayer(("FT0",), (), ("FT01",))]) == {"FT001", "FT002"}
    assert resolve_selection(codes, [SelectionLayer(("FT001",), (), ("FT0",))]) == {"FT001"}
    assert resolve_selection(codes, [SelectionLayer(("FT001",), (), ("FT001",))]) == set()
    # the command line (second layer) selecting a code overrides the config's ignore of it
    cfg = SelectionLayer(None, (), ("FT01",))
    assert resolve_selection(codes, [cfg]) == {"FT001", "FT002"}
    assert resolve_selection(codes, [cfg, SelectionLayer(("FT010",))]) == {"FT010"}
    assert resolve_selection(codes, [cfg, SelectionLayer(None, ("FT011",))]) == {"FT001", "FT002", "FT011"}
    assert resolve_selection(codes, [SelectionLayer(("ALL",), (), ("FT002",))]) == {"FT001", "FT010", "FT011"}


# --------------------------------------------------------------------------- inline suppression


def _probe_line(engine: Path, cls: str) -> tuple[Path, int]:
    _, doc = run_json(engine, "--select", "FT999")
    (hit,) = [f for f in doc["findings"] if f["message"].endswith(cls)]
    return engine / hit["file"], hit["line"]


def test_inline_suppression_removes_exactly_that_finding(engine, probe):
    _, before = run_json(engine, "--select", "FT999,FT016")
    path, line = _probe_line(engine, "AlphaForCausalLM")
    add_comment(path, line, "# flowtrace: ignore[FT999]")
    code, after = run_json(engine, "--select", "FT999,FT016")
    assert len(after["findings"]) == len(before["findings"]) - 1
    assert [f for f in after["findings"] if "AlphaForCausalLM" in f["message"]] == []
    assert any("BetaForCausalLM" in f["message"] for f in after["findings"])
    assert after["summary"]["suppressed_inline"] == 1
    assert code == 1


def test_inline_suppression_of_a_real_finding(tmp_path):
    """Rule-agnostic: suppressing the first real finding removes it and nothing else."""
    engine = copy_engine(tmp_path)
    _, before = run_json(engine, "--ignore", "FT016")
    if not before["findings"]:
        pytest.skip("no rule reports anything on the fixture yet")
    first = before["findings"][0]
    add_comment(engine / first["file"], first["line"], f"# flowtrace: ignore[{first['rule']}]")
    _, after = run_json(engine, "--ignore", "FT016")
    same_spot = [
        f
        for f in before["findings"]
        if (f["rule"], f["file"], f["line"]) == (first["rule"], first["file"], first["line"])
    ]
    expected = sorted(key(f) for f in before["findings"] if f not in same_spot)
    assert sorted(map(key, after["findings"])) == expected
    assert after["summary"]["suppressed_inline"] == len(same_spot)


def test_suppression_needs_the_right_code(engine, probe):
    path, line = _probe_line(engine, "AlphaForCausalLM")
    add_comment(path, line, "# flowtrace: ignore[FT001]")
    _, doc = run_json(engine, "--select", "FT999")
    assert any("AlphaForCausalLM" in f["message"] for f in doc["findings"])
    assert doc["summary"]["suppressed_inline"] == 0


def test_unused_unknown_and_bare_suppressions_are_ft016(engine, probe):
    alpha, line = _probe_line(engine, "AlphaForCausalLM")
    beta, beta_line = _probe_line(engine, "BetaForCausalLM")
    unused, unknown = append_lines(alpha, "X = 1  # flowtrace: ignore[FT999]", "Y = 2  # flowtrace: ignore[FT777]")
    add_comment(alpha, line, "# flowtrace: ignore")  # bare: no codes
    add_comment(beta, beta_line, "# flowtrace: ignore[FT999]")  # used
    code, doc = run_json(engine, "--select", "FT999,FT016")
    ft016 = {(f["file"], f["line"]): f for f in doc["findings"] if f["rule"] == "FT016"}
    rel = alpha.relative_to(engine).as_posix()
    assert set(ft016) == {(rel, unused), (rel, unknown), (rel, line)}
    assert all(f["severity"] == "info" and f["name"] == "unused-suppression" for f in ft016.values())
    assert "FT999" in ft016[(rel, unused)]["message"]
    assert "FT777" in ft016[(rel, unknown)]["message"]
    assert "codes" in ft016[(rel, line)]["message"]
    # the bare comment did not suppress Alpha; the coded one did suppress Beta
    assert any("AlphaForCausalLM" in f["message"] for f in doc["findings"] if f["rule"] == "FT999")
    assert not any("BetaForCausalLM" in f["message"] for f in doc["findings"])
    # FT016 is info: it alone does not fail at the default level, and it can be ignored
    _, quiet = run_json(engine, "--select", "FT999,FT016", "--ignore", "FT016")
    assert not [f for f in quiet["findings"] if f["rule"] == "FT016"]
    probe.targets = set()
    assert run_json(engine, "--select", "FT999,FT016")[0] == 0


def test_suppressions_for_rules_not_enabled_are_not_reported(engine, probe):
    append_lines(engine / "sglang" / "srt" / "models" / "alpha.py", "X = 1  # flowtrace: ignore[FT999]")
    _, doc = run_json(engine, "--select", "FT016")
    assert doc["findings"] == []


def test_docstring_mention_is_not_a_suppression(engine, probe):
    target = engine / "sglang" / "srt" / "models" / "plain.py"
    target.write_text('"""Write `# flowtrace: ignore[FT999]` to silence a finding."""\n' + target.read_text())
    _, doc = run_json(engine, "--select", "FT016")
    assert doc["findings"] == []


# --------------------------------------------------------------------------- config


def write_config(engine: Path, body: str) -> None:
    (engine / "pyproject.toml").write_text("[project]\nname = 'x'\n\n[tool.flowtrace]\n" + body)


def test_config_select_fail_on_and_per_file_ignores(engine, probe):
    write_config(engine, 'select = ["FT999"]\nfail-on = "error"\n')
    code, doc = run_json(engine)
    assert {f["rule"] for f in doc["findings"]} == {"FT999"} and code == 0
    code, _ = run_json(engine, "--fail-on", "warning")  # the command line wins
    assert code == 1
    write_config(engine, 'select = ["FT999"]\n[tool.flowtrace.per-file-ignores]\n"**/alpha.py" = ["FT9"]\n')
    _, doc = run_json(engine)
    assert [f["message"] for f in doc["findings"]] == ["probe hit BetaForCausalLM"]
    assert doc["summary"]["ignored_per_file"] == 1
    write_config(engine, 'select = ["FT999"]\nexclude = ["alpha.py"]\n')
    _, doc = run_json(engine)
    assert [f["message"] for f in doc["findings"]] == ["probe hit BetaForCausalLM"]
    # --isolated ignores the table
    _, doc = run_json(engine, "--isolated", "--select", "FT999")
    assert len(doc["findings"]) == 2


def test_config_ignore_is_overridden_by_cli_select(engine, probe):
    write_config(engine, 'ignore = ["FT999"]\n')
    _, doc = run_json(engine)
    assert "FT999" not in {f["rule"] for f in doc["findings"]}
    _, doc = run_json(engine, "--select", "FT999")
    assert {f["rule"] for f in doc["findings"]} == {"FT999"}


@pytest.mark.parametrize(
    "body, must_name",
    [
        ('selct = ["FT001"]\n', "selct"),
        ('select = "FT001"\n', "select"),
        ('ignore = ["FT001", 3]\n', "ignore"),
        ('extend-select = ["ZZ9"]\n', "extend-select"),
        ('fail-on = "fatal"\n', "fail-on"),
        ('profile = "no-such-engine"\n', "profile"),
        ('per-file-ignores = ["FT001"]\n', "per-file-ignores"),
        ('[tool.flowtrace.per-file-ignores]\n"a.py" = ["QQ1"]\n', "per-file-ignores"),
        ("select = [\n", "pyproject.toml"),
    ],
)
def test_bad_config_is_one_line_naming_file_and_key(engine, body, must_name):
    write_config(engine, body)
    res = invoke("check", engine, *FAST)
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr
    assert str(engine / "pyproject.toml") in lines[0] and must_name in lines[0]


def test_tool_flowtrace_must_be_a_table(engine):
    (engine / "pyproject.toml").write_text("[tool]\nflowtrace = 3\n")
    res = invoke("check", engine, *FAST)
    assert res.exit_code == 2 and "tool.flowtrace" in res.stderr


# --------------------------------------------------------------------------- baseline


def test_baseline_accepts_known_findings_and_fails_on_new_ones(engine, probe, tmp_path):
    baseline = tmp_path / "baseline.json"
    res = invoke("check", engine, *FAST, "--select", "FT999", "--write-baseline", baseline)
    assert res.exit_code == 0 and baseline.is_file()
    assert "2 by baseline" in res.stderr

    code, doc = run_json(engine, "--select", "FT999", "--baseline", baseline)
    assert code == 0 and doc["findings"] == [] and doc["summary"]["suppressed_baseline"] == 2

    # line-independent: shifting the code down keeps the baseline valid
    alpha = engine / "sglang" / "srt" / "models" / "alpha.py"
    alpha.write_text("\n\n\n" + alpha.read_text())
    assert run_json(engine, "--select", "FT999", "--baseline", baseline)[0] == 0

    probe.targets = probe.targets | {"GammaForCausalLM"}
    code, doc = run_json(engine, "--select", "FT999", "--baseline", baseline)
    assert code == 1
    assert [f["message"] for f in doc["findings"]] == ["probe hit GammaForCausalLM"]
    assert doc["summary"]["suppressed_baseline"] == 2


def test_baseline_counts_duplicate_fingerprints():
    from flowtrace.lint import baseline

    def finding(line: int) -> Finding:
        return Finding("FT999", "x", "warning", "a.py", line, "m", "s", "same-fp")

    accepted = baseline.from_findings([finding(1), finding(2)])
    kept, suppressed = accepted.apply([finding(1), finding(2), finding(3)])
    assert suppressed == 2 and len(kept) == 1


@pytest.mark.parametrize(
    "content",
    [
        None,
        "{not json",
        '{"schema": "other/1", "findings": {}}',
        '{"schema": "flowtrace.baseline/1", "findings": {"x": {"count": 0}}}',
    ],
)
def test_bad_baseline_is_exit_2(engine, tmp_path, content):
    baseline = tmp_path / "b.json"
    if content is not None:
        baseline.write_text(content)
    res = invoke("check", engine, *FAST, "--baseline", baseline)
    assert res.exit_code == 2 and str(baseline) in res.stderr and len(res.stderr.strip().splitlines()) == 1


# --------------------------------------------------------------------------- output


def test_stdout_holds_only_the_format_and_summary_goes_to_stderr(engine, probe):
    res = invoke("check", engine, *FAST, "--select", "FT999", "--output-format", "json-lines")
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert len(rows) == 2
    for row in rows:
        assert {"rule", "name", "severity", "file", "line", "message", "symbol", "fingerprint"} <= set(row)
        assert not Path(row["file"]).is_absolute() and (engine / row["file"]).is_file()
    assert "2 findings" in res.stderr and "suppressed inline" in res.stderr and "by baseline" in res.stderr

    concise = invoke("check", engine, *FAST, "--select", "FT999", "--output-format", "concise")
    assert len(concise.stdout.splitlines()) == 2
    assert all(" FT999 [warning] " in line for line in concise.stdout.splitlines())

    full = invoke("check", engine, *FAST, "--select", "FT999", "--output-format", "full")
    alpha_lines = (engine / "sglang" / "srt" / "models" / "alpha.py").read_text().splitlines()
    (alpha_row,) = [r for r in rows if "Alpha" in r["message"]]
    assert alpha_lines[alpha_row["line"] - 1].strip() in full.stdout  # the source line is shown
    assert "hint:" in full.stdout


def test_output_file_is_written_and_stdout_is_empty(engine, probe, tmp_path):
    out = tmp_path / "reports" / "flowtrace.json"
    res = invoke("check", engine, *FAST, "--select", "FT999", "--output-format", "json", "-o", out)
    assert res.exit_code == 1 and res.stdout == ""
    doc = json.loads(out.read_text())
    assert doc["schema"].startswith("flowtrace.check/") and len(doc["findings"]) == 2


def test_run_check_api_matches_cli(engine, probe):
    outcome = run_check(engine, select=["FT999"], jobs=1, cache_dir=FAST[-1])
    _, doc = run_json(engine, "--select", "FT999")
    assert [f.fingerprint for f in outcome.findings] == [f["fingerprint"] for f in doc["findings"]]
    assert outcome.exit_code == 1 and outcome.counts["warning"] == 2


# --------------------------------------------------------------------------- rules / explain / docs


def test_rules_lists_every_registered_rule():
    from flowtrace.render.rules_doc import registered_rules

    codes = [r.code for r in registered_rules()]
    assert "FT016" in codes
    text = invoke("rules")
    assert text.exit_code == 0
    assert [line.split()[0] for line in text.stdout.splitlines()] == codes
    doc = json.loads(invoke("rules", "--format", "json").stdout)
    assert [r["code"] for r in doc] == codes
    assert all({"name", "severity", "summary"} <= set(r) and r["severity"] in SEVERITIES for r in doc)


def test_explain_prints_all_metadata_and_rejects_unknown_codes():
    from flowtrace.render.rules_doc import registered_rules

    for rule in registered_rules():
        res = invoke("explain", rule.code.lower())
        assert res.exit_code == 0
        for part in (rule.code, rule.name, rule.summary, rule.rationale, rule.fix):
            assert part in res.stdout
        for example in rule.valid + rule.invalid:
            assert example.code.splitlines()[0] in res.stdout
    res = invoke("explain", "FT000")
    assert res.exit_code == 2
    assert all(r.code in res.stderr for r in registered_rules())


def test_committed_rules_doc_is_fresh():
    from flowtrace.render.rules_doc import rules_markdown

    assert "FT999" not in Rule.registry
    committed = (REPO / "docs" / "rules.md").read_text(encoding="utf-8")
    assert (
        committed == rules_markdown()
    ), "docs/rules.md is stale: python -m flowtrace.cli.check --write-rules-doc docs/rules.md"


def test_pre_commit_hook_runs_flowtrace_check():
    yaml = pytest.importorskip("yaml")
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    (hook,) = [h for h in hooks if h["id"] == "flowtrace-check"]
    assert hook["entry"].split()[:2] == ["flowtrace", "check"]
    assert hook["pass_filenames"] is False


def test_flow_survives_into_json(engine):
    class Flowing(Rule):
        code = "FT997"
        name = "test-flow"
        summary = rationale = fix = "test"

        def check(self, result):
            ff = next(f for f in result.files if f.classes)
            loc = ff.classes[0].location
            yield self.finding(loc, "flow", None, "flow", (loc, Location(loc.file, loc.line + 1)))

    try:
        _, doc = run_json(engine, "--select", "FT997")
    finally:
        Rule.registry.pop("FT997", None)
    (f,) = doc["findings"]
    assert [step["line"] for step in f["flow"]] == [f["line"], f["line"] + 1]

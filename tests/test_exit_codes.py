"""Every exit code of every command, in one table (flowtrace/cli/exits.py), checked against
the code: README's table is the generated one, each command's --help ends with its row, and
each (command, code) the table lists is produced by running that command below (the probe's
runs that need an engine venv or a trained draft are named where their own tests make them).

Expectations come from the fixtures: sglang_like's AlphaForCausalLM captures with plus_one
(alpha.py), ZetaForCausalLM's setter writes ids no loop reads (epsilon.py: captures nothing);
FT014 (eagle3_draft.py) has no codemod; ``tests/probe/probe_tiny_targets.py``'s make_engine
feeds b = [1, 3, 4] for ids [0, 2, 3].
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from fixture_paths import SGLANG_LIKE
from flowtrace.cli.exits import EXIT_CODES, codes, section
from flowtrace.cli.main import main

REPO = Path(__file__).resolve().parents[1]
FAST = ("--no-cache", "--jobs", "1")
PROBE_TARGETS = Path(__file__).parent / "probe"

# (command, code) made by tests that need what this module does not build
ELSEWHERE = {
    ("probe draft", 0): "tests/probe/test_probe_draft.py",
    ("probe draft", 1): "tests/probe/test_probe_draft.py",
    ("probe engine", 0): "tests/probe/test_engine_probe.py",
    ("probe engine", 1): "tests/probe/test_engine_probe_cli.py",
}


def test_the_readme_table_is_the_generated_one():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert section() in readme, "README's exit-code table is stale: run python -m flowtrace.cli.exits README.md"


@pytest.mark.parametrize("command", list(EXIT_CODES))
def test_each_help_ends_with_its_exit_codes(command):
    res = CliRunner().invoke(main, [*command.split(), "--help"])
    assert res.exit_code == 0, res.output
    tail = res.stdout.split("Exit codes:", 1)[1]
    listed = [int(line.split()[0]) for line in tail.splitlines() if line.strip()]
    assert listed == list(codes(command)), tail


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("exits")
    out: dict[str, Path] = {"tmp": tmp}
    plain = tmp / "plain"
    plain.mkdir()
    (plain / "hello.py").write_text("print('hello')\n", encoding="utf-8")
    out["plain"] = plain
    changed = tmp / "changed"
    shutil.copytree(SGLANG_LIKE, changed, ignore=shutil.ignore_patterns(".flowtrace_cache", "__pycache__"))
    alpha = changed / "sglang/srt/models/alpha.py"  # AlphaForCausalLM's setter: plus_one -> identity in NEW
    alpha.write_text(
        alpha.read_text(encoding="utf-8").replace("[val + 1 for val in layer_ids]", "list(layer_ids)"), encoding="utf-8"
    )
    out["changed"] = changed
    target = tmp / "target.json"
    target.write_text(
        json.dumps({"architectures": ["AlphaForCausalLM"], "num_hidden_layers": 32, "hidden_size": 64}),
        encoding="utf-8",
    )
    out["target"] = target
    # SpecForge ids [1, 15, 28]: plus_one serves b=[2, 16, 29], their training layout (MATCH)
    draft = tmp / "draft.json"
    draft.write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLMEagle3"],
                "target_hidden_size": 64,
                "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28]},
            }
        ),
        encoding="utf-8",
    )
    out["draft"] = draft
    # trained on b=[0, 3, 31] as boundaries, served b=[2, 16, 29]: MISMATCH
    out["scan_json"] = tmp / "scan.json"
    assert (
        CliRunner()
        .invoke(main, ["scan", str(SGLANG_LIKE), *FAST, "--format", "json", "-o", str(out["scan_json"])])
        .exit_code
        == 0
    )
    confirmed = {
        "schema": "flowtrace.probe/1",
        "command": "capture",
        "verdict": "confirmed",
        "claim": {"model": "m.A", "boundaries": [0]},
        "boundaries": [0],
    }
    out["confirmed"] = tmp / "confirmed.json"
    out["confirmed"].write_text(json.dumps(confirmed), encoding="utf-8")
    out["refuted"] = tmp / "refuted.json"
    out["refuted"].write_text(json.dumps({**confirmed, "verdict": "refuted", "boundaries": [1]}), encoding="utf-8")
    return out


def _cases(f: dict[str, Path]) -> list[tuple[str, tuple, int]]:
    s = str(SGLANG_LIKE)
    return [
        ("scan", ("scan", s, *FAST), 0),
        ("scan", ("scan", f["plain"], *FAST), 2),
        ("check", ("check", s, *FAST, "--exit-zero"), 0),
        ("check", ("check", s, *FAST), 1),
        ("check", ("check", f["plain"], *FAST), 2),
        ("fix", ("fix", s, *FAST, "--select", "FT014"), 0),
        ("fix", ("fix", s, *FAST), 1),
        ("fix", ("fix", s, *FAST, "--diff", "--write"), 2),
        ("trace", ("trace", s, *FAST, "-m", "AlphaForCausalLM", "-L", "32"), 0),
        ("trace", ("trace", s, *FAST, "-m", "ZetaForCausalLM", "-L", "32"), 1),
        ("trace", ("trace", s, *FAST, "-m", "AlphaForCausalLM"), 2),
        ("compat", ("compat", s, *FAST, "--target-config", f["target"], "--draft-config", f["draft"]), 0),
        (
            "compat",
            (
                "compat",
                s,
                *FAST,
                "--target-config",
                f["target"],
                "--draft-config",
                f["draft"],
                "--trained-boundaries",
                "0,3,31",
            ),
            1,
        ),
        ("compat", ("compat", s, *FAST, "--target-config", f["tmp"] / "missing.json", "--draft-config", f["draft"]), 2),
        ("diff", ("diff", s, s, *FAST), 0),
        ("diff", ("diff", s, f["changed"], *FAST), 1),
        ("diff", ("diff", s, f["plain"], *FAST), 2),
        ("graph", ("graph", s, *FAST), 0),
        ("graph", ("graph", f["plain"], *FAST), 2),
        ("report", ("report", "--scan", f["scan_json"], "-o", f["tmp"] / "r.html"), 0),
        ("report", ("report", "--scan", f["tmp"] / "missing.json", "-o", f["tmp"] / "r2.html"), 2),
        ("rules", ("rules",), 0),
        ("rules", ("rules", "--format", "yaml"), 2),
        ("explain", ("explain", "FT007"), 0),
        ("explain", ("explain", "FT999"), 2),
        (
            "probe capture",
            (
                "probe",
                "capture",
                "--path",
                PROBE_TARGETS,
                "--factory",
                "probe_tiny_targets:make_engine",
                "--factory-arg",
                "layer_ids=[0,2,3]",
                "--expect",
                "1,3,4",
            ),
            0,
        ),
        (
            "probe capture",
            (
                "probe",
                "capture",
                "--path",
                PROBE_TARGETS,
                "--factory",
                "probe_tiny_targets:make_engine",
                "--factory-arg",
                "layer_ids=[0,2,3]",
                "--expect",
                "0,2,3",
            ),
            1,
        ),
        ("probe capture", ("probe", "capture"), 2),
        ("probe draft", ("probe", "draft", f["tmp"] / "no-such-draft"), 2),
        ("probe engine", ("probe", "engine", "--target-config", f["target"]), 2),
        ("probe merge", ("probe", "merge", f["confirmed"]), 0),
        ("probe merge", ("probe", "merge", f["confirmed"], f["refuted"]), 1),
        ("probe merge", ("probe", "merge", f["tmp"] / "missing.json"), 2),
    ]


def test_every_listed_code_is_produced_by_a_run(files):
    made = {(command, code) for command, _, code in _cases(files)} | set(ELSEWHERE)
    listed = {(command, code) for command in EXIT_CODES for code in codes(command) if code != 130}
    assert listed == made, f"listed but never run: {sorted(listed - made)}; run but not listed: {sorted(made - listed)}"
    for where in set(ELSEWHERE.values()):
        assert (REPO / where).is_file(), where


def _torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def test_each_command_exits_as_its_row_says(files):
    # only probe capture's runs need torch; without it every other command is still run
    cases = [case for case in _cases(files) if _torch() or case[0] != "probe capture"]
    wrong = []
    for command, args, code in cases:
        res = CliRunner().invoke(main, [str(a) for a in args])
        if res.exit_code != code:
            wrong.append(f"{' '.join(map(str, args))}: exit {res.exit_code}, expected {code}: {res.output[-300:]}")
        if code == 2:
            lines = [line for line in res.stderr.splitlines() if line.strip()]
            if not (len(lines) == 1 and lines[0].startswith("flowtrace: error: ")):
                wrong.append(f"{command}: exit 2 without one error line: {res.stderr!r}")
    assert not wrong, "\n".join(wrong)

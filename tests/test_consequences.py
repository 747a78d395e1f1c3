"""Findings are graded by consequence (flowtrace.model.consequence), on fixture engines written
for it (tests/fixtures/rules/: static trees, not run as torch code by the probe agreement test):
one model per consequence in ``consequences_like`` and the same code as a fork-like package
(``fork_like/forkserve``: no engine's detect path matches; its family is chosen by content).

Expected values come from reading the fixtures (each file's docstring says what it holds)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from click.testing import CliRunner

from flowtrace import api
from flowtrace.checks.base import Finding, fingerprint
from flowtrace.checks.grading import merge_causes
from flowtrace.cli.check import check
from flowtrace.lint import baseline as baselines
from flowtrace.model.consequence import Consequence, severity_of
from flowtrace.model.facts import Location, ProblemKind

from fixture_paths import RULE_FIXTURES as FIXTURES

SW, CS, CU, FR, RS = (
    Consequence.SILENT_WRONG,
    Consequence.CRASH_SERVING,
    Consequence.CRASH_STARTUP,
    Consequence.FRAGILE,
    Consequence.REFUSED_STARTUP,
)


def _graded(root, package):
    m = f"{package}/srt/models/"
    found = api.findings(api.scan(root))
    return {
        (f.rule, f.file.removeprefix(m), f.line, f.consequence, f.severity) for f in found if f.rule != "FT010"
    }, found


EXPECTED = {
    ("FT013", "silent.py", 19, SW, "error"),  # hidden_states appended without the residual
    # hidden_states + residual while residual is None: the TypeError is met in SGLang's start-up
    # forward (CUDA graph capture with the aux capture on), so it is a start-up crash (warning);
    # crash_serving cases are pinned in tests/test_drafts_catalogue.py (drafts_like)
    ("FT022", "crash.py", 18, CU, "warning"),
    ("FT007", "fragile.py", 42, FR, "warning"),  # identity only for ids naming b = L
    ("FT001", "refused.py", 48, RS, "info"),  # wrapper without the setter: refused at start-up
}


def test_severity_follows_consequence_in_one_place():
    # silent_wrong, crash_serving | crash_startup, fragile | refused_startup | unreachable (DESIGN.md section 3)
    assert [severity_of(c) for c in Consequence] == ["error", "error", "warning", "warning", "info", None]


def test_one_model_per_consequence():
    graded, found = _graded(FIXTURES / "consequences_like", "sglang")
    assert graded == EXPECTED
    # unreachable code reports nothing: the orphan model, and the inner model only a refused wrapper builds
    assert not [f for f in found if f.file.endswith("orphan.py") or (f.file.endswith("refused.py") and f.line != 48)]


def test_errors_state_their_consequence_and_the_path_from_an_entry():
    _, found = _graded(FIXTURES / "consequences_like", "sglang")
    errors = {f.file.rsplit("/", 1)[-1]: f for f in found if f.severity in ("error", "warning")}
    assert errors["silent.py"].entry_path == "SilentForCausalLM -> SilentModel"
    assert errors["crash.py"].entry_path == "CrashForCausalLM -> CrashModel"
    assert "without the residual" in errors["silent.py"].effect
    assert "a TypeError (tensor + None)" in errors["crash.py"].effect and "b=0 (id -1)" in errors["crash.py"].effect
    assert "start-up fails" in errors["crash.py"].effect
    refused = next(f for f in found if f.rule == "FT001")
    # the profile's own start-up message, with the class named
    assert refused.effect.startswith(
        "the engine refuses this model at start-up: ValueError: Model RefusedVLForConditionalGeneration"
    )


def test_fork_like_package_keeps_consequences_and_speaks_its_own_familys_words():
    # No detect path matches the renamed package; the tree defines the SGLang-shaped setter and
    # registry variable, so its family is chosen by content (engines/family.py) and the refusal
    # quotes that family's start-up message with the fork's own class name.
    graded, found = _graded(FIXTURES / "fork_like", "forkserve")
    assert graded == EXPECTED
    choice = api.scan(FIXTURES / "fork_like").choice
    assert choice is not None and choice.names == ("sglang",) and choice.how == "content"
    refused = next(f for f in found if f.rule == "FT001")
    assert refused.effect.startswith(
        "the engine refuses this model at start-up: ValueError: Model RefusedVLForConditionalGeneration"
    )
    crash = next(f for f in found if f.rule == "FT022")
    assert "b=0 (id -1)" in crash.effect  # the family's own embedding id (ids mean "output of layer i")


def _finding(
    rule, file, line, symbol, severity="warning", consequence=FR, kind=ProblemKind.TRANSFORM_INCONSISTENT, message="m"
):
    return Finding(
        rule,
        "n",
        severity,
        file,
        line,
        message,
        symbol,
        fingerprint(rule, symbol, "s"),
        kind=kind,
        consequence=consequence,
    )


def test_per_platform_copies_are_one_finding_with_related_locations():
    a = _finding(
        "FT021",
        "pkg/m/amd/model.py",
        10,
        "pkg.m.amd.model.XForCausalLM",
        message="X declares it (pkg/m/amd/model.py:3)",
    )
    b = _finding(
        "FT021",
        "pkg/m/nvidia/model.py",
        12,
        "pkg.m.nvidia.model.XForCausalLM",
        message="X declares it (pkg/m/nvidia/model.py:4)",
    )
    (merged,) = merge_causes([b, a])
    assert (merged.file, merged.line, merged.related) == (
        "pkg/m/amd/model.py",
        10,
        (Location("pkg/m/nvidia/model.py", 12),),
    )
    assert merged.fingerprint == a.fingerprint


def test_id_convention_findings_on_one_setter_are_one_finding_with_the_worst_consequence():
    transform = _finding("FT007", "m.py", 5, "m.X.set", consequence=FR)
    embedding = _finding(
        "FT009", "m.py", 5, "m.X", severity="error", consequence=CS, kind=ProblemKind.EMBEDDING_ID_DROPPED
    )
    (merged,) = merge_causes([transform, embedding])
    assert (merged.rule, merged.consequence, merged.severity) == ("FT009", CS, "error")
    assert "same cause as FT007" in merged.message


def test_findings_of_one_rule_at_one_place_for_several_classes_name_the_others():
    one = _finding(
        "FT010",
        "a.py",
        7,
        "a.AForCausalLM",
        consequence=None,
        kind=ProblemKind.LAST_LAYER_UNREACHABLE,
        message="A: no b=L",
    )
    two = _finding(
        "FT010",
        "a.py",
        7,
        "a.BForCausalLM",
        consequence=None,
        kind=ProblemKind.LAST_LAYER_UNREACHABLE,
        message="B: no b=L",
    )
    (merged,) = merge_causes([one, two])
    assert merged.message.endswith("also affects BForCausalLM")


def test_fingerprint_does_not_change_when_severity_does():
    f = _finding("FT001", "w.py", 3, "w.W", severity="error", consequence=None, kind=ProblemKind.WRAPPER_WITHOUT_SETTER)
    regraded = dataclasses.replace(f, severity="info", consequence=RS)
    assert regraded.fingerprint == f.fingerprint == fingerprint("FT001", "w.W", "s")


def test_baseline_written_before_the_regrading_still_matches(tmp_path):
    """A baseline of main's findings (same rule, symbol, snippet; other severity) suppresses them."""
    root = FIXTURES / "consequences_like"
    found = api.findings(api.scan(root))
    baseline = tmp_path / "baseline.json"
    # what the same findings looked like before the regrading: every one an error
    baselines.write(baseline, [dataclasses.replace(f, severity="error", consequence=None) for f in found])
    res = CliRunner().invoke(check, [str(root), "--no-cache", "--baseline", str(baseline), "--output-format", "json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["summary"]["suppressed_baseline"] == len(found) > 0


@pytest.mark.parametrize("fmt", ["sarif", "github", "full"])
def test_renderers_carry_consequence_and_related_locations(fmt, tmp_path):
    root = FIXTURES / "consequences_like"
    res = CliRunner().invoke(check, [str(root), "--no-cache", "--output-format", fmt, "--exit-zero"])
    assert res.exit_code == 0, res.output
    if fmt == "sarif":
        results = json.loads(res.stdout)["runs"][0]["results"]
        silent = next(r for r in results if r["ruleId"] == "FT013")
        assert silent["level"] == "error" and silent["properties"]["consequence"] == "silent_wrong"
        assert "Consequence: the draft silently receives" in silent["message"]["text"]
        refused = next(r for r in results if r["ruleId"] == "FT001")
        assert refused["level"] == "note" and refused["properties"]["consequence"] == "refused_startup"
    elif fmt == "github":
        assert "::error " in res.stdout and "consequence: the draft silently receives" in res.stdout
    else:
        assert (
            "= consequence: a draft asking for b=0 (id -1): start-up fails with a TypeError" in res.stdout
            and "= reached from: CrashForCausalLM -> CrashModel" in res.stdout
        )


def test_wrappers_sharing_a_base_without_the_setter_are_one_finding_at_the_base(tmp_path):
    """FT001's base-class example: ExBaseForCausalLM (line 4 of the example, after the 2-line
    header: 6) defines forward and get_embed_and_head but no setter; ExA (line 13 -> 15) and
    ExB (line 18 -> 20) each build self.language_model. One finding at the base, the two
    wrappers as related locations; their own findings kept as causes, so a baseline written
    when each wrapper had its own finding still accepts the grouped one, and the fix stage
    (with_causes) plans the per-wrapper patches, not one for the base."""
    from flowtrace.checks.base import Rule, with_causes

    from test_rule_examples import _findings

    example = Rule.registry["FT001"].invalid[1]
    (found,) = _findings(tmp_path, example.code, "FT001", "")
    m = "sglang/srt/models/example.py"
    assert (found.line, found.symbol, found.grouped) == (6, "sglang.srt.models.example.ExBaseForCausalLM", True)
    assert found.related == (Location(m, 15), Location(m, 20))
    assert [c.symbol.rsplit(".", 1)[1] for c in found.causes] == ["ExAForCausalLM", "ExBForCausalLM"]
    assert [c.fingerprint for c in found.causes] == [
        fingerprint(
            "FT001",
            "sglang.srt.models.example.ExAForCausalLM",
            "language_model:sglang.srt.models.sib_a.SibAForCausalLM",
        ),
        fingerprint(
            "FT001",
            "sglang.srt.models.example.ExBForCausalLM",
            "language_model:sglang.srt.models.sib_b.SibBForCausalLM",
        ),
    ]
    assert with_causes([found]) == list(found.causes)
    before = baselines.from_findings(found.causes)
    assert before.apply([found]) == ([], 1)
    partial = baselines.from_findings(found.causes[:1])  # a wrapper added since: the group is new
    assert partial.apply([found]) == ([found], 0)
    assert "likewise for ExBForCausalLM" in (found.effect or "")


def test_suppressions_at_every_grouped_wrapper_still_suppress_the_finding_at_the_base(tmp_path):
    """Comments written when each wrapper had its own FT001 finding (lines 13 and 18 of the
    FT001 base-class example, 15 and 20 of the file) still suppress the grouped finding and
    count as used (no FT016); with one of them gone, the grouped finding is reported."""
    from flowtrace.checks.base import Rule
    from flowtrace.lint.runner import run_check

    from test_rule_examples import _sglang_tree

    code = Rule.registry["FT001"].invalid[1].code.splitlines()
    for line in (13, 18):
        code[line - 1] += "  # flowtrace: ignore[FT001]"
    root = tmp_path / "engine"
    _sglang_tree(root, "\n".join(code) + "\n")
    out = run_check(root, select=["FT001", "FT016"], jobs=1, use_cache=False, isolated=True, exit_zero=True)
    example = [f for f in out.findings if f.file.endswith("example.py")]
    assert example == [] and out.suppressed_inline == 1

    code[17] = code[17].split("  # flowtrace")[0]
    root2 = tmp_path / "engine2"
    _sglang_tree(root2, "\n".join(code) + "\n")
    out = run_check(root2, select=["FT001"], jobs=1, use_cache=False, isolated=True, exit_zero=True)
    assert [(f.rule, f.line, f.grouped) for f in out.findings if f.file.endswith("example.py")] == [("FT001", 6, True)]


def test_every_findings_consequence_is_one_its_rule_declares():
    """A finding's severity differs from its rule's only through a consequence the rule declares
    (``consequence`` or ``other_consequences``), so docs/rules.md and ``explain`` list every
    severity a rule's findings can have. Checked over every fixture engine."""
    from fixture_paths import FIXTURES as ENGINES
    from flowtrace.checks.base import Rule, all_rules

    all_rules()
    roots = [p for p in sorted(ENGINES.iterdir()) if p.is_dir()] + [
        p for p in sorted(FIXTURES.iterdir()) if p.is_dir() and p.name != "codes"
    ]
    for root in roots:
        drafts = (root / "drafts.toml",) if (root / "drafts.toml").is_file() else ()
        for f in api.findings(api.scan(root, drafts_files=drafts)):
            rule = Rule.registry[f.rule]
            assert f.consequence in (rule.consequence, *rule.other_consequences), (
                root.name,
                f.rule,
                f.consequence,
                f.message,
            )

"""SARIF 2.1.0 output: valid against the official schema and shaped for GitHub code scanning.

The schema in tests/data is the OASIS SARIF 2.1.0 JSON schema (see tests/data/README.md).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

import jsonschema
import pytest

from flowtrace.lint.runner import run_check
from flowtrace.checks.base import Finding, Rule, fingerprint
from flowtrace.model.facts import Location
from flowtrace.render.rules_doc import registered_rules
from flowtrace.render.sarif import to_sarif

FIXTURES = Path(__file__).parent / "fixtures" / "engines"
RULE_FIXTURES = Path(__file__).parent / "fixtures" / "rules"
SCHEMA = json.loads((Path(__file__).parent / "data" / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))


def validate(doc: dict) -> None:
    cls = jsonschema.validators.validator_for(SCHEMA)
    cls.check_schema(SCHEMA)
    cls(SCHEMA, format_checker=cls.FORMAT_CHECKER).validate(doc)


def results(doc: dict) -> list[dict]:
    return doc["runs"][0]["results"]


def uri_of(location: dict) -> str:
    return location["physicalLocation"]["artifactLocation"]["uri"]


def assert_relative_posix(uri: str) -> None:
    assert uri and "\\" not in uri and "://" not in uri and not uri.startswith("/")
    assert ".." not in Path(unquote(uri)).parts


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("facts")


@pytest.fixture
def flow_rule():
    """FT999: a note (no consequence: info) with a two-step capture path on AlphaForCausalLM; another on line 0 of
    beta.py."""

    class FlowRule(Rule):
        code = "FT999"
        name = "test-flow"
        summary = "Test-only rule with a flow."
        rationale = "SARIF codeFlows."
        fix = "None."

        def check(self, result):
            for ff in result.files:
                for cls in ff.classes:
                    if cls.name == "AlphaForCausalLM":
                        steps = (cls.location, Location(cls.location.file, cls.location.line + 2))
                        yield self.finding(cls.location, "probe with flow", cls.qualname, cls.name, steps)
                    if cls.name == "BetaForCausalLM":
                        yield self.finding(Location(ff.path, 0), "whole-file probe", cls.qualname, cls.name)

    try:
        yield FlowRule
    finally:
        Rule.registry.pop("FT999", None)


@pytest.mark.parametrize("engine", ["sglang_like", "vllm_like"])
def test_fixture_engine_sarif_validates_and_indexes_rules(engine, cache):
    outcome = run_check(FIXTURES / engine, jobs=1, cache_dir=cache)
    doc = json.loads(to_sarif(outcome.findings, root=outcome.root))
    validate(doc)
    assert doc["version"] == "2.1.0"
    run = doc["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["name"] == "flowtrace" and driver["version"] and driver["informationUri"].startswith("https://")
    rules = driver["rules"]
    assert [r["id"] for r in rules] == [r.code for r in registered_rules()]  # every rule, not only those that fired
    for descriptor in rules:
        for field in ("name", "shortDescription", "fullDescription", "help", "helpUri", "defaultConfiguration"):
            assert descriptor.get(field), (descriptor["id"], field)
        assert descriptor["help"]["text"] and descriptor["help"]["markdown"]
        assert descriptor["helpUri"].lower().endswith("#" + descriptor["id"].lower())
        assert descriptor["defaultConfiguration"]["level"] in ("error", "warning", "note")
    assert len(results(doc)) == len(outcome.findings)
    levels = {"error": "error", "warning": "warning", "info": "note"}
    for res, f in zip(results(doc), outcome.findings):
        assert rules[res["ruleIndex"]]["id"] == res["ruleId"] == f.rule
        assert res["level"] == levels[f.severity]
        assert res["message"]["text"] == f.message + (f" Consequence: {f.effect}." if f.effect else "")
        assert res["partialFingerprints"] == {"flowtrace/v1": f.fingerprint}
        (loc,) = res["locations"]
        assert loc["physicalLocation"]["artifactLocation"]["uriBaseId"] == "%SRCROOT%"
        assert_relative_posix(uri_of(loc))
        assert loc["physicalLocation"]["region"]["startLine"] >= 1
    base = run["originalUriBaseIds"]["%SRCROOT%"]["uri"]
    assert base.startswith("file://") and base.endswith("/")


def test_codeflows_line_zero_and_uris_resolve(tmp_path, monkeypatch, flow_rule, cache):
    engine = tmp_path / "checkout" / "engine"
    shutil.copytree(FIXTURES / "sglang_like", engine, ignore=shutil.ignore_patterns(".flowtrace_cache", "__pycache__"))
    monkeypatch.chdir(tmp_path / "checkout")  # CI: the scanned tree is a folder of the repository
    outcome = run_check("engine", select=["FT999"], jobs=1, cache_dir=cache)
    doc = json.loads(to_sarif(outcome.findings, root=outcome.root))
    validate(doc)
    base = Path(unquote(urlparse(doc["runs"][0]["originalUriBaseIds"]["%SRCROOT%"]["uri"]).path))
    assert base == (tmp_path / "checkout").resolve()

    by_message = {r["message"]["text"]: r for r in results(doc)}
    flowing = by_message["probe with flow"]
    (loc,) = flowing["locations"]
    uri = uri_of(loc)
    assert_relative_posix(uri)
    # relative to the repository, not the scanned folder
    assert uri.startswith("engine/") and (base / unquote(uri)).is_file()
    start = loc["physicalLocation"]["region"]["startLine"]
    source = (base / unquote(uri)).read_text().splitlines()
    assert source[start - 1].lstrip().startswith("class AlphaForCausalLM")  # 1-based
    (flow,) = flowing["codeFlows"]
    steps = flow["threadFlows"][0]["locations"]
    assert [s["location"]["physicalLocation"]["region"]["startLine"] for s in steps] == [start, start + 2]
    assert all(uri_of(s["location"]) == uri for s in steps)

    whole_file = by_message["whole-file probe"]
    assert whole_file["locations"][0]["physicalLocation"]["region"]["startLine"] == 1
    assert "codeFlows" not in whole_file


def test_tree_outside_the_working_folder_is_relative_to_its_root(tmp_path, monkeypatch):
    root = tmp_path / "engine"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "my file.py").write_text("x = 1\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    f = Finding(
        "FT015",
        "unreadable-file",
        "info",
        "pkg/my file.py",
        0,
        "msg: with, punctuation",
        None,
        fingerprint("FT015", None, "x"),
    )
    doc = json.loads(to_sarif([f], root=root))
    validate(doc)
    (res,) = results(doc)
    assert unquote(uri_of(res["locations"][0])) == "pkg/my file.py"
    assert " " not in uri_of(res["locations"][0])  # percent-encoded
    assert res["level"] == "note"
    assert res["locations"][0]["physicalLocation"]["region"]["startLine"] == 1


def test_empty_run_validates(tmp_path):
    doc = json.loads(to_sarif([], root=tmp_path))
    validate(doc)
    assert results(doc) == [] and doc["runs"][0]["tool"]["driver"]["rules"]


def test_cli_sarif_output(tmp_path, cache):
    from click.testing import CliRunner

    from flowtrace.cli.check import check

    out = tmp_path / "flowtrace.sarif"
    res = CliRunner().invoke(
        check,
        [
            str(FIXTURES / "vllm_like"),
            "-j",
            "1",
            "--cache-dir",
            str(cache),
            "--output-format",
            "sarif",
            "-o",
            str(out),
            "--exit-zero",
        ],
    )
    assert res.exit_code == 0, res.stderr
    assert res.stdout == ""
    validate(json.loads(out.read_text()))


def test_every_finding_with_a_chain_has_a_valid_code_flow(cache):
    """Real rules on the rule fixture engines: each finding whose chain has links carries one
    codeFlow with those links in order (the reported location among them, marked essential),
    the typed problem kind as a property, and the document validates against the schema."""
    for engine in ("rules_sglang", "rules_vllm"):
        outcome = run_check(RULE_FIXTURES / engine, jobs=1, cache_dir=cache, exit_zero=True)
        doc = json.loads(to_sarif(outcome.findings, root=outcome.root))
        validate(doc)
        chained = [f for f in outcome.findings if f.flow]
        assert len(chained) >= (5 if engine == "rules_sglang" else 2), engine
        by_fp = {r["partialFingerprints"]["flowtrace/v1"]: r for r in results(doc)}
        for f in outcome.findings:
            res = by_fp[f.fingerprint]
            assert res["properties"]["problem"] == f.kind.value
            if not f.flow:
                assert "codeFlows" not in res
                continue
            (flow,) = res["codeFlows"]
            steps = flow["threadFlows"][0]["locations"]
            lines = [
                (unquote(uri_of(s["location"])), s["location"]["physicalLocation"]["region"]["startLine"])
                for s in steps
            ]
            assert [line for _, line in lines] == [step.line for step in f.flow]
            assert [s["executionOrder"] for s in steps] == list(range(1, len(steps) + 1))
            assert [s["location"]["message"]["text"].replace(" (reported here)", "") for s in steps] == list(
                f.flow_labels
            )
            essential = [s for s in steps if s.get("importance") == "essential"]
            assert essential and all(
                s["location"]["physicalLocation"]["region"]["startLine"] == f.line for s in essential
            )


def test_ft022_code_flow_goes_from_the_none_binding_to_the_capture(cache):
    """dee.py: residual = None at line 14, the unguarded append at line 20 (read from the fixture)."""
    outcome = run_check(RULE_FIXTURES / "rules_vllm", jobs=1, cache_dir=cache, exit_zero=True, select=["FT022"])
    doc = json.loads(to_sarif(outcome.findings, root=outcome.root))
    (res,) = results(doc)
    steps = res["codeFlows"][0]["threadFlows"][0]["locations"]
    assert [s["location"]["physicalLocation"]["region"]["startLine"] for s in steps] == [14, 20]
    assert [s["location"]["message"]["text"] for s in steps] == [
        "bound to None",
        "sum with the None operand (reported here)",
    ]

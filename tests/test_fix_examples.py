"""Every fixable rule's fix examples (Fixit's ``expected_replacement``): the INVALID module,
written into the examples' engine tree (tests/test_rule_examples.py), goes through the whole
fix pipeline (codemod, re-scan of the patched copy, trace check), and the patched module must
equal the expected source written by hand in the rule's module."""

from __future__ import annotations

import pytest

from flowtrace import api
from flowtrace.checks.base import all_rules
from flowtrace.fix.registry import codemod
from flowtrace.fix.run import fix_findings
from flowtrace.index.build import IndexOptions

from test_rule_examples import SGLANG_HEADER, _sglang_tree

FIXABLE = [r for r in all_rules() if r.autofix]
CASES = [pytest.param(r.code, i, ex, id=f"{r.code}-fix-{i}") for r in FIXABLE for i, ex in enumerate(r.fix_examples)]


def test_the_fixable_rules_declare_codemod_and_examples():
    assert {r.code for r in FIXABLE} == {"FT001", "FT009", "FT022", "FT026"}
    for rule in FIXABLE:
        assert rule.fix_examples, rule.code
        assert callable(codemod(rule.code)), rule.code


@pytest.mark.parametrize("code, index, example", CASES)
def test_fix_example(tmp_path, code, index, example):
    root = tmp_path / "engine"
    example_path = _sglang_tree(root, example.code)
    options = IndexOptions(use_cache=False, jobs=1)
    result = api.scan(root, options=options)
    findings = [f for f in api.findings(result, (code,)) if f.file == example_path]
    assert findings, f"{code} fix example {index} has no finding to fix"
    report = fix_findings(result, findings, options=options)
    assert not report.withheld, [w.why for w in report.withheld]
    edits = {e.path: e.after for e in report.edits()}
    assert list(edits) == [example_path]
    assert edits[example_path] == SGLANG_HEADER + example.expected

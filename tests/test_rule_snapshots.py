"""A snapshot per rule, like ruff's: each code has a fixture whose expected findings were written
by hand from reading it, and the rule's findings on it must be exactly those.

Codes with a file in ``tests/fixtures/rules/codes/`` (``ftNNN.py``): the file is a complete
model module, placed as ``models/example.py`` of the example harness's engine tree (three
SGLang-shaped siblings with the usual conventions; another engine's tree where the docstring
says ``tree: lmdeploy``), and its docstring lists the findings as
``expect: LINE KIND "message fragment"`` lines. Codes whose cases live in the shared rule
fixture engines (``rules_sglang`` / ``rules_vllm``, one module per case) use the expectations
of ``tests/test_rule_fixtures.py``, compared here one code at a time. Every registered code
needs one of the two: a new rule without a snapshot fails ``test_every_rule_has_a_snapshot``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from flowtrace import api
from flowtrace.checks.base import all_rules
from flowtrace.index.build import IndexOptions
from flowtrace.lint.runner import run_check
from flowtrace.model.facts import ProblemKind

from fixture_paths import RULE_FIXTURES
from test_rule_examples import _TREES
from test_rule_fixtures import EXPECTED_SGLANG, EXPECTED_VLLM, _keyed

CODES = RULE_FIXTURES / "codes"
EXPECT = re.compile(r'^expect: (\d+) (\w+) "(.*)"$', re.M)


def _expected(path: Path) -> list[tuple[int, ProblemKind, str]]:
    return [(int(line), ProblemKind(kind), fragment) for line, kind, fragment in EXPECT.findall(path.read_text())]


TREE = re.compile(r"^tree: (\w+)$", re.M)


def _own_findings(tmp_path: Path, code: str, text: str) -> list:
    """The fixture as ``models/example.py`` of the example harness's tree: SGLang-shaped, or the
    engine its docstring names (``tree: lmdeploy``), written without the harness's header so
    that its line numbers are the file's own."""
    root = tmp_path / "engine"
    tree = TREE.search(text)
    example = _TREES[tree.group(1) if tree else ""](root, text)
    (root / example).write_text(text)
    if code == "FT016":
        found = run_check(
            root, select=["FT009", "FT016"], jobs=1, use_cache=False, isolated=True, exit_zero=True
        ).findings
    else:
        found = api.findings(api.scan(root, options=IndexOptions(use_cache=False, jobs=1)), select=(code,))
    return [f for f in found if f.rule == code and f.file == example]


OWN = sorted(p.stem.upper() for p in CODES.glob("ft*.py"))
SHARED = sorted({e[0] for e in EXPECTED_SGLANG | EXPECTED_VLLM})


@pytest.mark.parametrize("code", OWN)
def test_rule_snapshot_own_fixture(tmp_path, code):
    path = CODES / f"{code.lower()}.py"
    expected = _expected(path)
    assert expected, f"{path.name} lists no expected finding"
    found = _own_findings(tmp_path, code, path.read_text())
    assert sorted((f.line, f.kind) for f in found) == sorted((line, kind) for line, kind, _ in expected), [
        (f.line, f.kind, f.message) for f in found
    ]
    for line, kind, fragment in expected:
        messages = [f.message for f in found if f.line == line and f.kind == kind]
        assert any(fragment in m for m in messages), (line, fragment, messages)


@pytest.fixture(scope="module")
def shared_findings():
    scan = {
        name: api.scan(RULE_FIXTURES / name, options=IndexOptions(use_cache=False, jobs=1))
        for name in ("rules_sglang", "rules_vllm")
    }
    return _keyed(api.findings(scan["rules_sglang"])) | _keyed(api.findings(scan["rules_vllm"]))


@pytest.mark.parametrize("code", SHARED)
def test_rule_snapshot_shared_fixtures(shared_findings, code):
    expected = {e for e in EXPECTED_SGLANG | EXPECTED_VLLM if e[0] == code}
    assert {f for f in shared_findings if f[0] == code} == expected


def test_every_rule_has_a_snapshot():
    missing = sorted({r.code for r in all_rules()} - set(OWN) - set(SHARED))
    assert not missing, f"rules without a snapshot fixture: {missing}"

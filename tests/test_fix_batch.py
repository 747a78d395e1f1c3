"""The fix run judges its patches in groups: one re-scan for a group whose patches all verify,
halving a group that fails down to single patches (which get the one-patch verdict and reason).

On fix_seed_like the three fixable findings (FT001 vlwrap.py, FT009 seek.py, FT022 noneres.py)
all verify (tests/test_fix_codemods.py checks each patch's text): with the reference scan that
is two scans in all, whatever the number of patches. A codemod made to return a patch that
leaves its finding in place must be withheld with the one-patch reason, the others offered.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from flowtrace import api
from flowtrace.fix import run as fix_run
from flowtrace.fix.model import Proposal
from flowtrace.fix.registry import codemod
from flowtrace.fix.run import fix_findings
from flowtrace.fix.verify import Workspace
from flowtrace.index.build import IndexOptions

from fixture_paths import FIXTURES

OPTIONS = IndexOptions(use_cache=False, jobs=1)
CODES = ("FT001", "FT009", "FT022")


@pytest.fixture
def seed(tmp_path: Path):
    root = tmp_path / "engine"
    shutil.copytree(FIXTURES / "fix_seed_like", root, ignore=shutil.ignore_patterns("__pycache__", ".flowtrace_cache"))
    result = api.scan(root, options=OPTIONS)
    return result, api.findings(result, CODES)


@pytest.fixture
def scans(monkeypatch):
    count = [0]
    real = Workspace.scan

    def counted(self):
        count[0] += 1
        return real(self)

    monkeypatch.setattr(Workspace, "scan", counted)
    return count


def _one_at_a_time(monkeypatch):
    def group(self, workspace, todo, before):
        for item in todo:
            before = self._one(workspace, item, before)
        return before

    monkeypatch.setattr(fix_run._Run, "group", group)


def test_patches_that_all_verify_cost_one_rescan(seed, scans):
    result, findings = seed
    report = fix_findings(result, findings, options=OPTIONS)
    assert sorted(v.proposal.rule for v in report.offered) == ["FT001", "FT009", "FT022"] and not report.withheld
    assert scans[0] == 2  # the unpatched copy, then the three patches together
    assert all(v.evidence[0].startswith("re-scan of 3 patches together: ") for v in report.offered)


def test_the_same_patches_as_one_at_a_time(seed, monkeypatch):
    result, findings = seed
    grouped = fix_findings(result, findings, options=OPTIONS)
    _one_at_a_time(monkeypatch)
    single = fix_findings(result, findings, options=OPTIONS)
    assert sorted((e.path, e.after) for e in grouped.edits()) == sorted((e.path, e.after) for e in single.edits())
    assert [(v.proposal.rule, v.proposal.file) for v in grouped.offered] == [
        (v.proposal.rule, v.proposal.file) for v in single.offered
    ]


def test_a_patch_that_fails_is_found_by_halving(seed, scans, monkeypatch):
    result, findings = seed

    def leaves_the_finding(result, finding, sources):
        real = codemod("FT022")(result, finding, sources)
        edit = real.edits[0]
        harmless = edit.before.replace("\n", "\n# a comment, not a fix\n", 1)
        return Proposal(real.rule, real.fingerprint, real.symbol, real.file, real.line, real.title,
                        (type(edit)(edit.path, edit.before, harmless),), real.expect)

    monkeypatch.setattr(fix_run, "codemod", lambda rule: leaves_the_finding if rule == "FT022" else codemod(rule))
    report = fix_findings(result, findings, options=OPTIONS)
    assert sorted(v.proposal.rule for v in report.offered) == ["FT001", "FT009"]
    (withheld,) = report.withheld
    assert withheld.rule == "FT022" and "the re-run analysis still reports it" in withheld.why
    # reference, the group of 3 (fails), then its halves ([FT022] alone at noneres.py, sorted first;
    # [FT009, FT001] together): 4 scans, not one per patch plus one
    assert scans[0] == 4


def test_a_known_defect_merged_into_another_finding_counts_as_known():
    """SGLang 0.5.23: FT009 at deepseek_v2.py:3458 is reported merged into another rule's root
    cause; a wrapper patched to serve DeepseekV2 takes it on (the finding now names one more
    class, so its fingerprint is new) and must not be refused as a new defect."""
    from flowtrace.checks.base import Finding
    from flowtrace.fix.verify import inherited
    from flowtrace.model.facts import ProblemKind

    kind = next(iter(ProblemKind))

    def finding(rule, fp, causes=()):
        return Finding(
            rule, "n", "error", "m/deepseek_v2.py", 3458, "msg", "m.DeepseekV2ForCausalLM", fp, kind=kind, causes=causes
        )

    before = [finding("FT007", "a", causes=(finding("FT009", "b"),))]
    proposal = Proposal("FT001", "c", "m.OcrForCausalLM", "m/ocr.py", 1, "t", ())
    assert inherited(finding("FT009", "b2"), before, proposal)
    assert not inherited(Finding("FT009", "n", "error", "m/other.py", 1, "msg", None, "z", kind=kind), before, proposal)

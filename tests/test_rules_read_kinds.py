"""Rules select on the chain's typed problem kinds and links, never on a problem's English text.

The fixture facts used here (read from the fixtures): iota_vl.py's wrapper hands the ids to a
language model whose class has no setter (DELEGATE_LACKS_SETTER, rule FT003); nu.py records
``hidden_states + residual`` while residual is None at index 0 (INDEX0_RAISES, which keeps FT009
away from Nu's setter).
"""

from __future__ import annotations

import dataclasses

from flowtrace.analysis.resolve import Project
from flowtrace.checks.run import run_rules
from flowtrace.model import facts as F


def _rewritten(result, text=None, kinds=None):
    """A copy of the scan whose rows' problems all say ``text`` and/or have their kind mapped
    through ``kinds`` (both the chain's problems and the row's flat copy)."""

    def problem(p):
        return dataclasses.replace(p, text=text if text is not None else p.text, kind=(kinds or {}).get(p.kind, p.kind))

    rows = []
    for row in result.project.rows:
        capture, chain = row.capture, row.chain
        if capture is not None:
            issues = tuple(problem(p) for p in capture.issues)
            capture = dataclasses.replace(capture, issues=issues, problems=tuple(text or t for t in capture.problems))
        if chain is not None:
            chain = dataclasses.replace(chain, problems=tuple(problem(p) for p in chain.problems))
        rows.append(dataclasses.replace(row, capture=capture, chain=chain))
    project = Project(result.project.files, result.project.conv)
    project.__dict__["rows"] = tuple(rows)  # the cached rows, replaced
    return dataclasses.replace(result, project=project)


def _fired(result) -> set[tuple[str, str, int, str | None]]:
    return {(f.rule, f.file, f.line, f.kind.value if f.kind else None) for f in run_rules(result)}


def test_changing_problem_texts_changes_no_rule(sglang_scan, vllm_scan):
    for scan in (sglang_scan, vllm_scan):
        before = _fired(scan)
        after = _fired(_rewritten(scan, text="lorem ipsum"))
        assert before and after == before


def test_changing_a_problem_kind_changes_the_rule(sglang_scan):
    iota = sglang_scan.project.row("IotaVLForConditionalGeneration").qualname
    before = {(r, f) for r, f, _, _ in _fired(sglang_scan)}
    assert ("FT003", "sglang/srt/models/iota_vl.py") in before
    relabelled = _rewritten(
        sglang_scan, kinds={F.ProblemKind.DELEGATE_LACKS_SETTER: F.ProblemKind.SETTER_WRITES_NOTHING}
    )
    assert relabelled.project.row(iota).chain.problems[0].text == sglang_scan.project.row(iota).chain.problems[0].text
    assert ("FT003", "sglang/srt/models/iota_vl.py") not in {(r, f) for r, f, _, _ in _fired(relabelled)}


def test_index0_kind_keeps_the_embedding_rule_away(sglang_scan):
    """FT009 skips setters whose chain already has INDEX0_RAISES (FT022 reports those); drop
    the kind and FT009 speaks about Nu's setter (nu.py) again."""
    nu_file = sglang_scan.project.row("NuForCausalLM").location.file

    def embedding_rule_speaks(result) -> bool:
        # FT009 on its own, or folded into FT007's finding on the same setter (one cause)
        return any(
            f.file == nu_file and (f.rule == "FT009" or "same cause as FT009" in f.message) for f in run_rules(result)
        )

    assert not embedding_rule_speaks(sglang_scan)
    relabelled = _rewritten(sglang_scan, kinds={F.ProblemKind.INDEX0_RAISES: F.ProblemKind.PACKER_COUNT_CHECK})
    assert embedding_rule_speaks(relabelled)

"""One fix run: scan, find the fixable findings, plan each patch, verify it, report.

Patches are planned one finding at a time against the tree as the earlier accepted patches
left it (:class:`flowtrace.fix.source.Sources`), so two fixes of one file compose; each is
verified on top of the accepted ones and dropped alone if it fails.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from flowtrace.analysis.scan import ScanResult
from flowtrace.fix.model import CannotFix, FixReport, Proposal, Verified, Withheld
from flowtrace.fix.registry import Codemod, codemod
from flowtrace.checks.base import Finding, with_causes
from flowtrace.fix.source import Sources
from flowtrace.fix.verify import Workspace, verify, verify_batch
from flowtrace.index.build import IndexOptions


def fix_findings(
    result: ScanResult,
    findings: list[Finding],
    *,
    profile: str | None = None,
    options: IndexOptions | None = None,
    profile_files: tuple[str | Path, ...] = (),
    suppressed: Callable[[Finding], bool] | None = None,
) -> FixReport:
    """Plan and verify a patch for each fixable finding in ``findings`` (others are counted).
    The reference for "no new finding" is every rule's findings on the unpatched copy, scanned
    exactly as the patched copies are (same options), so the two sides compare like with like.
    ``suppressed`` drops merged causes the user silenced (a finding reported under another
    rule's root cause still carries them; :func:`flowtrace.fix.selection.suppressed_by`)."""
    fixable = [(f, codemod(f.rule)) for f in with_causes(findings) if suppressed is None or not suppressed(f)]
    todo = sorted(
        [(f, mod) for f, mod in fixable if mod is not None], key=lambda fm: (fm[0].file, fm[0].line, fm[0].rule)
    )
    run = _Run(result, Sources(result.root))
    if todo:
        workspace = Workspace(result.root, profile=profile, options=options, profile_files=profile_files)
        try:
            run.group(workspace, todo, workspace.scan()[1])
        finally:
            workspace.close()
    unfixable = tuple(
        Withheld(f.rule, f.fingerprint, f.symbol, f.file, f.line, f"no codemod for {f.rule}")
        for f, mod in fixable
        if mod is None
    )
    offered = sorted(run.offered, key=lambda v: (v.proposal.file, v.proposal.line, v.proposal.rule))
    withheld = sorted(run.withheld, key=lambda w: (w.file, w.line, w.rule))
    return FixReport(tuple(offered), tuple(withheld), len(fixable) - len(todo), unfixable)


class _Run:
    """Verification by halving: a group of proposals is planned on top of the accepted patches
    and judged with one re-scan; a group that fails is split in two and each half re-planned and
    judged on its own, down to single proposals, which get :func:`verify`'s own verdict (and
    why). When every patch verifies (the common case) the whole run costs two scans instead of
    one per patch; each failing patch costs about log2(n) more."""

    def __init__(self, result: ScanResult, sources: Sources) -> None:
        self.result, self.sources = result, sources
        self.offered: list[Verified] = []
        self.withheld: list[Withheld] = []

    def _plan(self, todo: list[tuple[Finding, Codemod]]) -> tuple[list[Proposal], list[Withheld], Sources]:
        """Each finding's proposal, planned in order on a trial copy (patches of one file compose)."""
        trial = self.sources.fork()
        proposals, refused = [], []
        for finding, mod in todo:
            try:
                proposal = mod(self.result, finding, trial)
            except CannotFix as exc:
                refused.append(
                    Withheld(finding.rule, finding.fingerprint, finding.symbol, finding.file, finding.line, str(exc))
                )
                continue
            trial.accept(proposal.edits)
            proposals.append(proposal)
        return proposals, refused, trial

    def group(self, workspace: Workspace, todo: list[tuple[Finding, Codemod]], before: list[Finding]) -> list[Finding]:
        """Judge ``todo``; returns the findings of the tree with what was accepted (the next ``before``)."""
        if len(todo) == 1:
            return self._one(workspace, todo[0], before)
        proposals, refused, trial = self._plan(todo)
        if proposals:
            judged, found = verify_batch(workspace, proposals, dict(self.sources.current), dict(trial.current), before)
            if judged is None:
                half = len(todo) // 2
                return self.group(workspace, todo[half:], self.group(workspace, todo[:half], before))
            self.sources.current = trial.current
            self.offered += judged
            before = found
        self.withheld += refused
        return before

    def _one(self, workspace: Workspace, item: tuple[Finding, Codemod], before: list[Finding]) -> list[Finding]:
        finding, mod = item
        try:
            proposal = mod(self.result, finding, self.sources)
        except CannotFix as exc:
            self.withheld.append(
                Withheld(finding.rule, finding.fingerprint, finding.symbol, finding.file, finding.line, str(exc))
            )
            return before
        judged, found = verify(workspace, proposal, dict(self.sources.current), before)
        if isinstance(judged, Verified):
            self.sources.accept(proposal.edits)
            self.offered.append(judged)
            return found
        self.withheld.append(judged)
        return before


def unified_diff(report: FixReport, root_label: str = "") -> str:
    """One unified diff over every offered edit (``a/`` and ``b/`` prefixes, as git prints)."""
    import difflib

    out: list[str] = []
    for e in sorted(report.edits(), key=lambda e: e.path):
        name = f"{root_label}{e.path}"
        out += difflib.unified_diff(
            e.before.splitlines(keepends=True), e.after.splitlines(keepends=True), f"a/{name}", f"b/{name}"
        )
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in out)

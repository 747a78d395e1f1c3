"""One fix run: scan, find the fixable findings, plan each patch, verify it, report.

Patches are planned one finding at a time against the tree as the earlier accepted patches
left it (:class:`flowtrace.fix.source.Sources`), so two fixes of one file compose; each is
verified on top of the accepted ones and dropped alone if it fails.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from flowtrace.analysis.scan import ScanResult
from flowtrace.fix.model import CannotFix, FixReport, Verified, Withheld
from flowtrace.fix.registry import codemod
from flowtrace.checks.base import Finding, with_causes
from flowtrace.fix.source import Sources
from flowtrace.fix.verify import Workspace, verify
from flowtrace.index.build import IndexOptions


def fix_findings(
    result: ScanResult,
    findings: list,
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
    todo = [(f, mod) for f, mod in fixable if mod is not None]
    offered: list[Verified] = []
    withheld: list[Withheld] = []
    if todo:
        sources = Sources(result.root)
        workspace = Workspace(result.root, profile=profile, options=options, profile_files=profile_files)
        try:
            before = workspace.scan()[1]
            for finding, mod in sorted(todo, key=lambda fm: (fm[0].file, fm[0].line, fm[0].rule)):
                try:
                    proposal = mod(result, finding, sources)
                except CannotFix as exc:
                    withheld.append(Withheld(finding.rule, finding.fingerprint, finding.symbol, finding.file, finding.line, str(exc)))
                    continue
                judged, found = verify(workspace, proposal, dict(sources.current), before)
                if isinstance(judged, Verified):
                    sources.accept(proposal.edits)
                    before = found
                    offered.append(judged)
                else:
                    withheld.append(judged)
        finally:
            workspace.close()
    unfixable = tuple(Withheld(f.rule, f.fingerprint, f.symbol, f.file, f.line, f"no codemod for {f.rule}") for f, mod in fixable if mod is None)
    return FixReport(tuple(offered), tuple(withheld), len(fixable) - len(todo), unfixable)


def unified_diff(report: FixReport, root_label: str = "") -> str:
    """One unified diff over every offered edit (``a/`` and ``b/`` prefixes, as git prints)."""
    import difflib

    out: list[str] = []
    for e in sorted(report.edits(), key=lambda e: e.path):
        name = f"{root_label}{e.path}"
        out += difflib.unified_diff(e.before.splitlines(keepends=True), e.after.splitlines(keepends=True), f"a/{name}", f"b/{name}")
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in out)

"""Re-run the analysis on the patched tree before a patch is offered.

The patched files go into a private copy of the tree (hard links for every other file, so a
copy of a large engine costs little; a patched file replaces its link, never writes through
it). The copy is scanned and checked like the original, and a proposal passes when:

1. every patched Python file still parses (the stdlib ``ast`` is the judge, as for the index);
2. the finding it fixes is gone (matched by fingerprint, which does not depend on line numbers);
3. no finding appears that the original tree did not have;
4. the trace serves the boundaries the proposal promises (:mod:`flowtrace.fix.expect`).
"""

from __future__ import annotations

import ast
import os
import shutil
import tempfile
from pathlib import Path

from flowtrace.analysis.scan import ScanResult, scan
from flowtrace.checks.run import run_rules
from flowtrace.checks.base import Finding, with_causes
from flowtrace.fix.expect import check
from flowtrace.fix.model import Proposal, Verified, Withheld
from flowtrace.fix.write import replace_atomically, resolve_inside
from flowtrace.index.build import IndexOptions

_SKIP = shutil.ignore_patterns("__pycache__", ".flowtrace_cache", ".git", "*.pyc")


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


class Workspace:
    """A private copy of ``root`` in which patched texts can be put and taken back."""

    def __init__(
        self, root: Path, *, profile: str | None, options: IndexOptions | None, profile_files: tuple[str | Path, ...]
    ) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="flowtrace-fix-")
        self.root = Path(self._tmp.name) / root.resolve().name
        shutil.copytree(root, self.root, ignore=_SKIP, copy_function=_link_or_copy, symlinks=True)
        self.profile, self.options, self.profile_files = profile, options, profile_files
        self._originals: dict[str, str] = {}

    def put(self, files: dict[str, str]) -> None:
        for rel, text in files.items():
            path = resolve_inside(self.root, rel)
            if rel not in self._originals:
                self._originals[rel] = path.read_bytes().decode("utf-8")
            replace_atomically(path, text)

    def reset(self, keep: dict[str, str]) -> None:
        """Put back the original text of every file not in ``keep``, and ``keep``'s texts."""
        for rel, text in self._originals.items():
            replace_atomically(resolve_inside(self.root, rel), keep.get(rel, text))

    def scan(self) -> tuple[ScanResult, list[Finding]]:
        result = scan(self.root, profile=self.profile, options=self.options, profile_files=self.profile_files)
        return result, run_rules(result)

    def close(self) -> None:
        self._tmp.cleanup()


def _parse_errors(proposal: Proposal) -> list[str]:
    out = []
    for e in proposal.edits:
        if e.path.endswith(".py"):
            try:
                ast.parse(e.after)
            except SyntaxError as exc:
                out.append(f"{e.path}: the patched text does not parse (line {exc.lineno}: {exc.msg})")
    return out


def inherited(finding: Finding, before: list[Finding], proposal: Proposal) -> bool:
    """A finding the patched tree has that is an existing defect reaching one more class: the
    same rule and kind at the same place (a grouped finding now naming the patched class too),
    or the same rule and kind as a finding of a class the proposal says it inherits from."""
    known = with_causes(before)  # a known defect may be reported merged into another rule's root cause
    place = (finding.rule, finding.kind, finding.file, finding.line)
    if any((g.rule, g.kind, g.file, g.line) == place for g in known):
        return True
    return any(g.rule == finding.rule and g.kind == finding.kind and g.symbol in proposal.inherits_from for g in known)


def verify_batch(workspace: Workspace, proposals: list[Proposal], accepted: dict[str, str], texts: dict[str, str],
                 before: list[Finding]) -> tuple[list[Verified] | None, list[Finding]]:
    """Judge several proposals with one re-scan of the tree holding ``texts`` (the accepted
    texts with every proposal applied, in order). All pass the checks of :func:`verify`, each
    on the combined tree, or the batch is refused (None) and the caller judges smaller groups:
    a failure says only that *some* proposal, or two of them together, is wrong. A new finding
    counts as inherited when one proposal of the batch explains it."""
    if any(_parse_errors(p) for p in proposals):
        return None, before
    workspace.reset(accepted)
    workspace.put(texts)
    try:
        result, found = workspace.scan()
    finally:
        workspace.reset(accepted)
    after = {f.fingerprint for f in with_causes(found)}
    known = {f.fingerprint for f in with_causes(before)}
    fresh = [f for f in with_causes(found) if f.fingerprint not in known]
    if any(p.fingerprint in after for p in proposals) or any(
        not any(inherited(f, before, p) for p in proposals) for f in fresh
    ):
        return None, before
    verified = []
    for p in proposals:
        if not p.expect or any(check(result, e) for e in p.expect):
            return None, before
        evidence = [
            f"re-scan of {len(proposals)} patches together: {p.rule} gone, no new finding ({len(found)} findings left)"
        ]
        # shown with the patch whose class the finding names (display only: the group decided)
        mine = [f for f in fresh if inherited(f, before, p) and p.symbol and p.symbol.rsplit(".", 1)[-1] in f.message]
        if mine:
            evidence.append(
                "takes on known limits of the code it now reaches: "
                + "; ".join(f"{f.rule} ({f.kind.value if f.kind else '-'}) at {f.file}:{f.line}" for f in mine)
            )
        evidence += [
            f"trace {e.model.rsplit('.', 1)[-1]} ids {list(e.ids)} L={e.num_layers}: boundaries {list(e.boundaries)}"
            for e in p.expect
        ]
        verified.append(Verified(p, tuple(evidence)))
    return verified, found


def verify(
    workspace: Workspace, proposal: Proposal, accepted: dict[str, str], before: list[Finding]
) -> tuple[Verified | Withheld, list[Finding]]:
    """Judge ``proposal`` on top of the ``accepted`` texts; ``before``: the findings (every
    rule) of the tree with the accepted texts. Returns the judgement and the patched tree's
    findings (the next proposal's ``before`` when this one is accepted)."""
    def withheld(why: str) -> Withheld:
        return Withheld(proposal.rule, proposal.fingerprint, proposal.symbol, proposal.file, proposal.line, why)

    broken = _parse_errors(proposal)
    if broken:
        return withheld("; ".join(broken)), before
    workspace.reset(accepted)
    workspace.put({**accepted, **{e.path: e.after for e in proposal.edits}})
    try:
        result, found = workspace.scan()
    finally:
        workspace.reset(accepted)
    after = {f.fingerprint: f for f in with_causes(found)}
    if proposal.fingerprint in after:
        return withheld(f"the re-run analysis still reports it: {after[proposal.fingerprint].message}"), before
    known = {f.fingerprint for f in with_causes(before)}
    fresh = [f for fp, f in after.items() if fp not in known]
    new = [f for f in fresh if not inherited(f, before, proposal)]
    if new:
        shown = "; ".join(f"{f.rule} {f.file}:{f.line}: {f.message}" for f in new[:2])
        return withheld(f"the patched tree has {len(new)} new finding(s): {shown}"), before
    evidence = [f"re-scan: {proposal.rule} gone, no new finding ({len(found)} findings left)"]
    if fresh:
        evidence.append(
            "takes on known limits of the code it now reaches: "
            + "; ".join(f"{f.rule} ({f.kind.value if f.kind else '-'}) at {f.file}:{f.line}" for f in fresh)
        )
    for expectation in proposal.expect:
        wrong = check(result, expectation)
        if wrong:
            return withheld(f"the trace does not serve what the fix promises: {wrong}"), before
        evidence.append(
            f"trace {expectation.model.rsplit('.', 1)[-1]} ids {list(expectation.ids)} L={expectation.num_layers}:"
            f" boundaries {list(expectation.boundaries)}"
        )
    if not proposal.expect:
        return (
            withheld("no model row captures through the patched code, so no trace can confirm what the fix serves"),
            before,
        )
    return Verified(proposal, tuple(evidence)), found

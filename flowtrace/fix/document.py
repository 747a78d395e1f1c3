"""``flowtrace fix --format json``: the fix report as a versioned document (``flowtrace.fix/1``).

One entry per finding the fix run looked at, so a CI job can tell, without parsing text, which
findings got a verified patch (with the evidence and the patch's own diff), which were refused
and why, which rules have no codemod, and, after ``--write``, what reached the disk.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flowtrace.fix.model import FixReport, Verified, Withheld
from flowtrace.fix.write import WriteResult

SCHEMA = "flowtrace.fix/1"


def _diff(v: Verified) -> str:
    from flowtrace.fix.run import unified_diff

    return unified_diff(FixReport((v,), (), 0))


def _verified(v: Verified, written: dict[str, WriteResult] | None) -> dict[str, Any]:
    p = v.proposal
    files = [e.path for e in p.edits]
    entry: dict[str, Any] = {
        "rule": p.rule,
        "fingerprint": p.fingerprint,
        "symbol": p.symbol,
        "file": p.file,
        "line": p.line,
        "status": "verified",
        "title": p.title,
        "evidence": list(v.evidence),
        "files": files,
        "diff": _diff(v),
    }
    if written is not None:  # --write: every file of the patch must have reached the disk
        results = [written[f] for f in files if f in written]
        entry["written"] = bool(results) and all(r.written for r in results)
        refused = [f"{r.path}: {r.why}" for r in results if not r.written]
        if refused:
            entry["write_refused"] = refused
    return entry


def _refused(w: Withheld, status: str) -> dict[str, Any]:
    return {
        "rule": w.rule,
        "fingerprint": w.fingerprint,
        "symbol": w.symbol,
        "file": w.file,
        "line": w.line,
        "status": status,
        "why": w.why,
    }


def fix_document(report: FixReport, *, mode: str, written: Sequence[WriteResult] | None = None) -> dict[str, Any]:
    """The report as JSON-ready data; ``written``: the write results of ``--write`` (None: nothing written)."""
    by_path = {r.path: r for r in written} if written is not None else None
    findings = [_verified(v, by_path) for v in report.offered]
    findings += [_refused(w, "refused") for w in report.withheld]
    findings += [_refused(w, "no_codemod") for w in report.unfixable]
    findings.sort(key=lambda f: (f["file"], f["line"], f["rule"], f["fingerprint"]))
    return {
        "schema": SCHEMA, "mode": mode, "findings": findings,
        "summary": {"verified": len(report.offered), "refused": len(report.withheld), "no_codemod": report.not_fixable,
                    "written": sum(1 for f in findings if f.get("written")) if by_path is not None else None},
    }


__all__ = ["SCHEMA", "fix_document"]

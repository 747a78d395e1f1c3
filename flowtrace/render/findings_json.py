"""``flowtrace check`` as JSON: a versioned document (``json``) or one finding per line (``json-lines``).

Each finding carries the stable fields ``rule``, ``name``, ``severity``, ``file`` (POSIX,
relative to the scanned root), ``line`` (1-based), ``message``, ``symbol`` and ``fingerprint``,
plus ``hint``, ``flow`` (the capture chain, a list of ``{"file", "line", "label"}``), ``kind`` (the
typed problem, :class:`flowtrace.model.facts.ProblemKind`), ``consequence`` (what it does to a served
draft, :class:`flowtrace.model.consequence.Consequence`; severity follows from it) with ``effect`` (the
same in words) and ``entry_path`` (how a draft reaches it), and ``related`` (the other places of the
same root cause), ``affects`` (the model classes the finding concerns beside its symbol's), and with ``--method``
``method`` (the speculative method it was found under, a profile's ``[methods.<name>]``). Fields are only
ever added; a change that removes or renames one bumps ``flowtrace.check/1``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Iterable

from flowtrace import __version__

if TYPE_CHECKING:
    from flowtrace.lint.runner import CheckOutcome
    from flowtrace.checks.base import Finding

SCHEMA = "flowtrace.check/1"


def finding_dict(f: Finding) -> dict[str, Any]:
    return {
        "rule": f.rule,
        "name": f.name,
        "severity": f.severity,
        "file": f.file,
        "line": f.line,
        "message": f.message,
        "symbol": f.symbol,
        "fingerprint": f.fingerprint,
        "hint": f.hint,
        "flow": [
            {"file": step.file, "line": step.line, **({"label": f.flow_labels[i]} if i < len(f.flow_labels) else {})}
            for i, step in enumerate(f.flow)
        ],
        "kind": f.kind.value if f.kind is not None else None,  # the typed problem (flowtrace.model.facts.ProblemKind)
        # what the defect does to a served draft (flowtrace.model.consequence.Consequence), in words
        "consequence": f.consequence.value if f.consequence is not None else None,
        "effect": f.effect,
        "entry_path": f.entry_path,
        "related": [{"file": where.file, "line": where.line} for where in f.related],
        # the model rows (qualnames) the finding names beside its symbol's
        "affects": list(f.affects),
        # the speculative method it was found under, only when --method names one (or all)
        **({"method": f.method} if f.method is not None else {}),
    }


def document(outcome: CheckOutcome) -> dict[str, Any]:
    counts = outcome.counts
    return {
        "schema": SCHEMA,
        "generator": f"flowtrace {__version__}",
        "root": str(outcome.root),
        "findings": [finding_dict(f) for f in outcome.findings],
        "summary": {
            "findings": len(outcome.findings),
            "errors": counts["error"],
            "warnings": counts["warning"],
            "info": counts["info"],
            "suppressed_inline": outcome.suppressed_inline,
            "suppressed_baseline": outcome.suppressed_baseline,
            "ignored_per_file": outcome.ignored_per_file,
            "fail_on": outcome.fail_on,
            "exit_code": outcome.exit_code,
        },
        "rules": list(outcome.enabled),
    }


def to_json(outcome: CheckOutcome) -> str:
    return json.dumps(document(outcome), indent=2, ensure_ascii=False) + "\n"


def to_json_lines(findings: Iterable[Finding]) -> str:
    return "".join(json.dumps(finding_dict(f), ensure_ascii=False, separators=(",", ":")) + "\n" for f in findings)

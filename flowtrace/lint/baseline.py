"""Baselines: accept today's findings, fail only on new ones.

A baseline is a JSON file keyed by finding fingerprint (rule + qualified symbol + normalised
snippet, never the line number, so it survives edits above a finding). Each entry keeps a
count: if two findings share a fingerprint the baseline accepts exactly as many as it saw, so
a third, new one still fails. The other fields (rule, file, line, message) are there for the
reader of a diff; only the fingerprint and the count are matched.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from flowtrace import __version__
from flowtrace.errors import UsageError
from flowtrace.checks.base import Finding

SCHEMA = "flowtrace.baseline/1"


class BaselineError(UsageError):
    """An unreadable or malformed baseline file (exit 2)."""


@dataclass(frozen=True)
class Baseline:
    counts: dict[str, int]

    def __len__(self) -> int:
        return sum(self.counts.values())

    def apply(self, findings: Iterable[Finding]) -> tuple[list[Finding], int]:
        """(findings not in the baseline, number the baseline suppressed)."""
        left = Counter(self.counts)
        kept: list[Finding] = []
        suppressed = 0
        for f in findings:
            if _accepts(left, f):
                suppressed += 1
            else:
                kept.append(f)
        return kept, suppressed


def _accepts(left: Counter[str], f: Finding) -> bool:
    """Take ``f`` from the counts: by its own fingerprint, or, for a finding that stands for
    several per-class findings (one report at their base class), when the baseline accepted
    every one of them (a baseline written before they were grouped still holds)."""
    if left[f.fingerprint] > 0:
        left[f.fingerprint] -= 1
        return True
    members = Counter(c.fingerprint for c in f.causes) if f.grouped else Counter()
    if not members or any(left[fp] < n for fp, n in members.items()):
        return False
    left.subtract(members)
    return True


def from_findings(findings: Iterable[Finding]) -> Baseline:
    return Baseline(dict(Counter(f.fingerprint for f in findings)))


def document(findings: Iterable[Finding]) -> dict[str, Any]:
    entries: dict[str, dict[str, Any]] = {}
    for f in sorted(findings, key=lambda f: (f.fingerprint, f.file, f.line)):
        entry = entries.get(f.fingerprint)
        if entry is None:
            entries[f.fingerprint] = {"rule": f.rule, "file": f.file, "line": f.line, "message": f.message, "count": 1}
        else:
            entry["count"] += 1
    return {"schema": SCHEMA, "generator": f"flowtrace {__version__}", "findings": entries}


def dumps(findings: Iterable[Finding]) -> str:
    return json.dumps(document(findings), indent=2, sort_keys=True) + "\n"


def write(path: str | Path, findings: Iterable[Finding]) -> None:
    from flowtrace.sources.output import write_atomic

    write_atomic(path, dumps(findings))


def read(path: str | Path) -> Baseline:
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BaselineError(f"{p}: baseline file not found (create it with --write-baseline {p})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BaselineError(f"{p}: cannot read baseline: {exc}") from None
    except (json.JSONDecodeError, RecursionError) as exc:
        raise BaselineError(f"{p}: baseline is not valid JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("findings"), dict):
        raise BaselineError(
            f'{p}: not a flowtrace baseline (expected an object with "schema": "{SCHEMA}" and "findings")'
        )
    counts: dict[str, int] = {}
    for fp, entry in doc["findings"].items():
        count = entry.get("count", 1) if isinstance(entry, dict) else None
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise BaselineError(f"{p}: findings.{fp}: expected an object with a positive integer \"count\"")
        counts[fp] = count
    return Baseline(counts)

"""Which findings a fix run may patch: what ``check`` reports, suppressions included.

``check`` applies ``[tool.flowtrace]`` selection, per-file-ignores and ``# flowtrace: ignore[...]``
comments to the findings it reports; a reported finding can still carry other rules' findings
merged in as the same root cause (``causes``), and the fix stage patches those too. A cause the
user silenced for its own file or line must stay unpatched, so this applies the same two
suppressions to every cause, read with the lint runner's own parsers.
"""

from __future__ import annotations

from collections.abc import Callable

from flowtrace.checks.base import Finding
from flowtrace.lint.runner import CheckOutcome, PerFileIgnores, collect_suppressions


def suppressed_by(outcome: CheckOutcome) -> Callable[[Finding], bool]:
    """True for a finding that per-file-ignores or an inline comment at its line silences."""
    per_file = PerFileIgnores(outcome.config.per_file_ignores)
    comments = collect_suppressions(outcome.result, {f.file for f in outcome.findings})

    def suppressed(finding: Finding) -> bool:
        comment = comments.get((finding.file, finding.line))
        return per_file.ignores(finding.file, finding.rule) or (comment is not None and finding.rule in comment.codes)

    return suppressed


__all__ = ["suppressed_by"]

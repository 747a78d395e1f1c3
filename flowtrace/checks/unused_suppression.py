"""FT016: suppression comments that suppress nothing (metadata only; the check runner reports it).

Whether a ``# flowtrace: ignore[...]`` comment is used is only known after every other rule has
run and inline suppressions were applied, so :func:`flowtrace.lint.runner.run_check` produces these
findings; :meth:`UnusedSuppression.check` yields nothing.
"""

from __future__ import annotations

from typing import Iterator

from flowtrace.checks.base import Example, Finding, Rule
from flowtrace.model.problems import ProblemKind


class UnusedSuppression(Rule):
    code = "FT016"
    name = "unused-suppression"
    severity = "info"
    summary = "A `# flowtrace: ignore[...]` comment suppresses nothing, names an unknown rule code, or names no code at all."
    rationale = (
        "Suppressions outlive the findings they were written for: once the engine code is fixed or the "
        "rule changes, a stale comment would silently hide the next real finding on that line. A bare "
        "`# flowtrace: ignore` is not a suppression (codes are required, so a comment never hides more "
        "than intended) and is reported so it is not mistaken for one. Codes of rules that are not "
        "enabled for the file are not reported."
    )
    kind = ProblemKind.UNUSED_SUPPRESSION
    fix = "Delete the comment, or the codes in it that no longer match a finding on that line; always name codes: `# flowtrace: ignore[FT001]`."
    valid = (
        Example("def set_eagle3_layers_to_capture(self, ids):  # flowtrace: ignore[FT009]", "FT009 reports this line"),
    )
    invalid = (
        Example("x = 1  # flowtrace: ignore[FT009]", "no FT009 finding on this line"),
        Example("def set_eagle3_layers_to_capture(self, ids):  # flowtrace: ignore", "no codes: not a suppression"),
        Example("x = 1  # flowtrace: ignore[FT999]", "unknown rule code"),
    )

    def check(self, result) -> Iterator[Finding]:
        return iter(())

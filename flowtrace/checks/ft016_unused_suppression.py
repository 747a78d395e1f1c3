"""FT016: suppression comments that suppress nothing (metadata only; the check runner reports it).

Whether a ``# flowtrace: ignore[...]`` comment is used is only known after every other rule has
run and inline suppressions were applied, so :func:`flowtrace.lint.runner.run_check` produces these
findings; :meth:`UnusedSuppression.check` yields nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from flowtrace.checks.base import Example, Finding, Rule
from flowtrace.checks.example_code import CAPTURING_MODEL, causal_lm, module
from flowtrace.model.facts import ProblemKind

if TYPE_CHECKING:
    from flowtrace.analysis.scan import ScanResult


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
        Example(
            module(CAPTURING_MODEL, causal_lm("""\
    def set_eagle3_layers_to_capture(self, layer_ids=None):  # flowtrace: ignore[FT009]
        self.capture_aux_hidden_states = True
        if layer_ids is None:
            num_layers = self.config.num_hidden_layers
            self.model.layers_to_capture = [2, num_layers // 2, num_layers - 3]
        else:
            self.model.layers_to_capture = list(layer_ids)
""")), 'FT009 reports this line'
        ),
    )
    invalid = (
        Example(
            """\
layers_to_capture = []  # flowtrace: ignore[FT009]
""", 'no FT009 finding on this line', line=1, kind=ProblemKind.UNUSED_SUPPRESSION, message='unused suppression for FT009'
        ),
        Example(
            """\
layers_to_capture = []  # flowtrace: ignore
""", 'no codes: not a suppression', line=1, kind=ProblemKind.UNUSED_SUPPRESSION, message='needs codes and suppresses nothing'
        ),
        Example(
            """\
layers_to_capture = []  # flowtrace: ignore[FT999]
""", 'unknown rule code', line=1, kind=ProblemKind.UNUSED_SUPPRESSION, message='unknown rule code FT999'
        ),
    )

    def check(self, result: ScanResult) -> Iterator[Finding]:
        return iter(())

"""FT016: suppression comments that suppress nothing (metadata only; the check runner reports it).

Whether a ``# flowtrace: ignore[...]`` comment is used is only known after every other rule has
run and inline suppressions were applied, so :func:`flowtrace.lint.runner.run_check` hands each
comment and what it silenced to :meth:`UnusedSuppression.judge`, which decides and words the
finding; :meth:`UnusedSuppression.check` (the scan-only path) yields nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator

from flowtrace.checks.base import Example, Finding, Rule
from flowtrace.checks.example_code import CAPTURING_MODEL, causal_lm, module
from flowtrace.model.facts import Location, ProblemKind

if TYPE_CHECKING:
    from flowtrace.analysis.scan import ScanResult


@dataclass(frozen=True, slots=True)
class CommentUse:
    """One suppression comment and the codes it silenced a finding of."""

    file: str
    line: int
    text: str  # the comment as written
    codes: tuple[str, ...]  # the codes it names (empty: a bare ``# flowtrace: ignore``)
    used: frozenset[str]


class UnusedSuppression(Rule):
    code = "FT016"
    name = "unused-suppression"
    consequence = None  # a capability note: info
    summary = (
        "A `# flowtrace: ignore[...]` comment suppresses nothing, names an unknown rule code, or names no code at all."
    )
    rationale = (
        "Suppressions outlive the findings they were written for: once the engine code is fixed or the "
        "rule changes, a stale comment would silently hide the next real finding on that line. A bare "
        "`# flowtrace: ignore` is not a suppression (codes are required, so a comment never hides more "
        "than intended) and is reported so it is not mistaken for one. Codes of rules that are not "
        "enabled for the file are not reported."
    )
    kind = ProblemKind.UNUSED_SUPPRESSION
    fix = (
        "Delete the comment, or the codes in it that no longer match a finding on that line; always name codes: `#"
        " flowtrace: ignore[FT001]`."
    )
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
""",
            "no FT009 finding on this line",
            line=1,
            kind=ProblemKind.UNUSED_SUPPRESSION,
            message="unused suppression for FT009",
            consequence=None,
            severity="info",
        ),
        Example(
            """\
layers_to_capture = []  # flowtrace: ignore
""",
            "no codes: not a suppression",
            line=1,
            kind=ProblemKind.UNUSED_SUPPRESSION,
            message="needs codes and suppresses nothing",
            consequence=None,
            severity="info",
        ),
        Example(
            """\
layers_to_capture = []  # flowtrace: ignore[FT999]
""",
            "unknown rule code",
            line=1,
            kind=ProblemKind.UNUSED_SUPPRESSION,
            message="unknown rule code FT999",
            consequence=None,
            severity="info",
        ),
    )

    def check(self, result: ScanResult) -> Iterator[Finding]:
        return iter(())

    def judge(
        self, use: CommentUse, known: tuple[str, ...], enabled: frozenset[str], ignores: Callable[[str, str], bool]
    ) -> Finding | None:
        """The finding for one comment, or None when every code it names silenced something
        (codes not enabled, or per-file-ignored for its file, are not called unused)."""
        if not use.codes:
            problems = ["needs codes"]
            message = (
                f"`{use.text}` needs codes and suppresses nothing: write `# flowtrace: ignore[FT001]` with the codes to"
                " silence"
            )
        else:
            unknown = [c for c in use.codes if c not in known]
            unused = [
                c
                for c in use.codes
                if c in known and c != self.code and c not in use.used and c in enabled and not ignores(use.file, c)
            ]
            if not unknown and not unused:
                return None
            parts = []
            if unused:
                parts.append(f"unused suppression for {', '.join(unused)} (no such finding on this line)")
            if unknown:
                parts.append(f"unknown rule code{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} in suppression")
            problems = unused + unknown
            message = "; ".join(parts)
        # the fingerprint hashes the file, the comment and its problems, never the line
        return self.finding(Location(use.file, use.line), message, None, f"{use.file}|{use.text}|{','.join(problems)}")

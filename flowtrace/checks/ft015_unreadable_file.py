"""FT015 unreadable-file: a file could not be read or parsed; its facts are missing from the analysis."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from flowtrace.checks.base import Example, Finding, Rule
from flowtrace.model import facts as F
from flowtrace.model.facts import ProblemKind

if TYPE_CHECKING:
    from flowtrace.analysis.scan import ScanResult


class UnreadableFile(Rule):
    code = "FT015"
    name = "unreadable-file"
    consequence = None  # a capability note: info
    summary = "A file could not be read or parsed; its facts are missing from the analysis."
    rationale = (
        "A scan that skips a file silently could hide a setter or a capture loop. Every file that names the "
        "engine's capture markers and cannot be parsed is reported and counted (files without a marker are "
        "skipped by the prefilter before parsing)."
    )
    kind = ProblemKind.UNREADABLE_FILE
    fix = (
        "Fix the syntax or encoding, or exclude the file (--exclude / [tool.flowtrace] exclude) if it is not engine"
        " code."
    )
    valid = (
        Example(
            """\
x = 1
""", 'parses'
        ),
    )
    invalid = (
        Example(
            """\
class ExForCausalLM(Module):
    def set_eagle3_layers_to_capture(self, layer_ids=None:
        pass
""", line=2, kind=ProblemKind.UNREADABLE_FILE, message='syntax error', consequence=None, severity="info"
        ),
    )

    def check(self, result: ScanResult) -> Iterator[Finding]:
        for d in result.index.diagnostics:
            if d.kind in {"parse-error", "too-large", "timeout", "unreadable", "internal"}:
                yield self.finding(
                    F.Location(d.file, max(d.line, 1)), f"{d.kind}: {d.reason}", None, f"{d.file}:{d.kind}"
                )

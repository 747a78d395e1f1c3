"""``flowtrace check``'s output formats: one dispatcher over the renderers."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from flowtrace.errors import UsageError

if TYPE_CHECKING:
    from flowtrace.lint.runner import CheckOutcome

OUTPUT_FORMATS = ("full", "concise", "json", "json-lines", "sarif", "github")


def render_check(outcome: CheckOutcome, fmt: str, *, cwd: Path | None = None) -> str:
    """The findings in one of :data:`OUTPUT_FORMATS` (what goes to stdout or ``-o``)."""
    if fmt in ("full", "concise"):
        from flowtrace.render.check_text import findings_text

        return findings_text(outcome, concise=fmt == "concise", cwd=cwd)
    if fmt == "json":
        from flowtrace.render.findings_json import to_json

        return to_json(outcome)
    if fmt == "json-lines":
        from flowtrace.render.findings_json import to_json_lines

        return to_json_lines(outcome.findings)
    if fmt == "sarif":
        from flowtrace.render.sarif import to_sarif

        return to_sarif(outcome.findings, root=outcome.root, cwd=cwd)
    if fmt == "github":
        from flowtrace.render.github import to_github

        return to_github(outcome.findings, root=outcome.root, cwd=cwd)
    raise UsageError(f"unknown output format {fmt!r} (choose from {', '.join(OUTPUT_FORMATS)})")

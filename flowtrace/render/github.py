"""``flowtrace check`` as GitHub Actions workflow commands (annotations on the pull request).

``::error file=F,line=L,title=FT001 name::message`` per finding; ``warning`` and ``notice``
for the other severities. Escaping follows the Actions toolkit (``@actions/core``
``command.ts``): in the message ``%``, ``\\r`` and ``\\n`` become ``%25``, ``%0D``, ``%0A``;
property values additionally escape ``:`` and ``,`` as ``%3A`` and ``%2C``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    from flowtrace.checks.base import Finding

LEVELS = {"error": "error", "warning": "warning", "info": "notice"}


def escape_data(value: str) -> str:
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(value: str) -> str:
    return escape_data(value).replace(":", "%3A").replace(",", "%2C")


def command(level: str, message: str, **properties: str | int) -> str:
    props = ",".join(f"{key}={escape_property(str(value))}" for key, value in properties.items() if value is not None)
    return f"::{level}{' ' + props if props else ''}::{escape_data(message)}"


def to_github(findings: Iterable[Finding], *, root: Path, cwd: Path | None = None) -> str:
    from flowtrace.lint.display_paths import display_path

    out = []
    for f in findings:
        message = f.message
        if f.effect:
            message += f"\nconsequence: {f.effect}"
        if f.related:
            message += f"\nand {len(f.related)} more: " + ", ".join(
                f"{display_path(root, w.file, cwd)}:{w.line}" for w in f.related
            )
        if f.hint:
            message += f"\nhint: {f.hint}"
        out.append(
            command(
                LEVELS.get(f.severity, "warning"),
                message,
                file=display_path(root, f.file, cwd),
                line=max(f.line, 1),
                title=f"{f.rule} {f.name}",
            )
        )
    return "".join(line + "\n" for line in out)

"""``flowtrace check`` as text: ``full`` (message, source line, hint) and ``concise`` (one line each).

Paths are relative to the working folder when the scanned tree is inside it, so an editor or
terminal can open them; lines are 1-based.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flowtrace.lint.runner import CheckOutcome
    from flowtrace.model.facts import Location

MAX_SNIPPET = 200


MAX_RELATED = 3


def related_text(root: Path, related: tuple[Location, ...], cwd: Path | None = None) -> str:
    """The other places of one root cause: a few named, then "and N more"."""
    from flowtrace.lint.display_paths import display_path

    named = ", ".join(f"{display_path(root, where.file, cwd)}:{where.line}" for where in related[:MAX_RELATED])
    rest = len(related) - MAX_RELATED
    return f"also at: {named}" + (f" and {rest} more" if rest > 0 else "")


def findings_text(outcome: CheckOutcome, *, concise: bool = False, cwd: Path | None = None) -> str:
    from flowtrace.lint.display_paths import display_path, read_source

    @lru_cache(maxsize=None)
    def lines(file: str) -> tuple[str, ...]:
        source = read_source(outcome.root, file)
        return tuple(source.splitlines()) if source is not None else ()

    blocks = []
    for f in outcome.findings:
        head = f"{display_path(outcome.root, f.file, cwd)}:{f.line}: {f.rule} [{f.severity}] {f.message}"
        if concise:
            if f.related:
                head += f" (and {len(f.related)} more)"
            blocks.append(head)
            continue
        block = [head]
        text = lines(f.file)
        if 1 <= f.line <= len(text):
            snippet = text[f.line - 1].expandtabs(4).rstrip()
            if len(snippet) > MAX_SNIPPET:
                snippet = snippet[: MAX_SNIPPET - 1] + "…"
            block.append(f"{f.line:>6} | {snippet}")
        if f.effect:
            block.append(f"{'':>6} = consequence: {f.effect}")
        if f.entry_path:
            block.append(f"{'':>6} = reached from: {f.entry_path}")
        if f.related:
            block.append(f"{'':>6} = {related_text(outcome.root, f.related, cwd)}")
        if f.hint:
            block.append(f"{'':>6} = hint: {f.hint}")
        blocks.append("\n".join(block))
    if not blocks:
        return ""
    return ("\n" if concise else "\n\n").join(blocks) + "\n"

"""The facts a fix run passes around: edits, proposals, what was offered or withheld and why."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


class CannotFix(Exception):
    """A codemod that will not patch this finding: the message says why (shown to the user)."""


def text_hash(text: str) -> str:
    """The content hash a write is checked against (the file must still read like this)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class FileEdit:
    """One file's new text; ``before_hash`` is the hash of the text the edit was made from."""

    path: str  # relative to the scanned root, "/"-separated
    before: str
    after: str

    @property
    def before_hash(self) -> str:
        return text_hash(self.before)


@dataclass(frozen=True, slots=True)
class Expectation:
    """What the trace must say on the patched tree: ``model`` with ``ids`` at ``num_layers``
    serves exactly ``boundaries`` (in the engine's concatenation order)."""

    model: str
    ids: tuple[int, ...]
    num_layers: int
    boundaries: tuple[int, ...]
    every_phase: bool = False  # also in every phase of serving (graph replay, after a weight reload)


@dataclass(frozen=True, slots=True)
class Proposal:
    """A codemod's patch for one finding, not yet verified."""

    rule: str
    fingerprint: str
    symbol: str | None
    file: str
    line: int
    title: str  # one line: what the patch does
    edits: tuple[FileEdit, ...]
    expect: tuple[Expectation, ...] = ()
    # Classes whose known findings the patched class may take on: a wrapper that now serves
    # its language model also serves that model's known limits (same rule and kind).
    inherits_from: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Verified:
    """A proposal the re-run analysis confirmed; ``evidence`` says what was checked."""

    proposal: Proposal
    evidence: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Withheld:
    """A fixable finding with no patch offered, and why."""

    rule: str
    fingerprint: str
    symbol: str | None
    file: str
    line: int
    why: str


@dataclass(frozen=True, slots=True)
class FixReport:
    offered: tuple[Verified, ...]
    withheld: tuple[Withheld, ...]
    not_fixable: int  # findings whose rule has no codemod (reported as before)
    unfixable: tuple[Withheld, ...] = ()  # those findings, for the JSON report ("why": no codemod)

    def edits(self) -> tuple[FileEdit, ...]:
        """The offered edits merged per file (a later proposal on the same file starts from
        the earlier one's text, see :func:`flowtrace.fix.run.fix_tree`)."""
        merged: dict[str, FileEdit] = {}
        for v in self.offered:
            for e in v.proposal.edits:
                first = merged.get(e.path)
                merged[e.path] = FileEdit(e.path, first.before if first else e.before, e.after)
        return tuple(merged.values())

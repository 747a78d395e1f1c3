"""The tree a fix run edits: files read once, earlier accepted edits applied on top.

Codemods read through :class:`Sources`, so a second patch of the same file starts from the
first one's result and the two compose. libcst helpers to find a class and its methods by
name and line sit here too, shared by the codemods.
"""

from __future__ import annotations

import functools
from pathlib import Path

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

from flowtrace.fix.model import CannotFix, FileEdit
from flowtrace.fix.write import resolve_inside


class Sources:
    """Read-only view of the scanned tree plus the edits accepted so far."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._original: dict[str, str] = {}
        self.current: dict[str, str] = {}

    def text(self, relative: str) -> str:
        if relative in self.current:
            return self.current[relative]
        if relative not in self._original:
            try:
                path = resolve_inside(self.root, relative)
                self._original[relative] = path.read_bytes().decode("utf-8")
            except (OSError, UnicodeDecodeError, ValueError) as exc:
                raise CannotFix(f"cannot read {relative}: {exc}") from None
        return self._original[relative]

    def fork(self) -> Sources:
        """A trial copy: edits accepted on it do not reach this one (files read once, shared)."""
        trial = Sources(self.root)
        trial._original = self._original
        trial.current = dict(self.current)
        return trial

    def accept(self, edits: tuple[FileEdit, ...]) -> None:
        for e in edits:
            self.current[e.path] = e.after

    def edit(self, relative: str, after: str) -> FileEdit:
        before = self.text(relative)
        if after == before:
            raise CannotFix(f"{relative}: the codemod changed nothing")
        return FileEdit(relative, before, after)


def parse(text: str, where: str) -> MetadataWrapper:
    """The libcst tree of ``text``, with its metadata resolved once per text.

    Codemods read the same files again and again (every wrapper of one language model parses
    that model's file; a group of patches is planned again when the fix run halves it), and a
    libcst parse plus positions costs about a second on a large model file, so trees are kept
    per text. A tree is never mutated (transformers return new ones), so sharing it is safe."""
    try:
        return _parsed(text)
    except cst.ParserSyntaxError as exc:
        raise CannotFix(f"{where}: libcst cannot parse it ({exc.message})") from None


@functools.lru_cache(maxsize=64)
def _parsed(text: str) -> MetadataWrapper:
    return MetadataWrapper(cst.parse_module(text))


def positions(wrapper: MetadataWrapper) -> dict[cst.CSTNode, CodeRange]:
    return _positions(wrapper)


@functools.lru_cache(maxsize=64)
def _positions(wrapper: MetadataWrapper) -> dict[cst.CSTNode, CodeRange]:
    return dict(wrapper.resolve(PositionProvider))


def one_class(module: cst.Module, name: str, line: int, pos: dict[cst.CSTNode, CodeRange], where: str) -> cst.ClassDef:
    """The class ``name`` defined at ``line`` (the facts' location), else the only one so named."""
    # the positions hold every node of the tree already: no second walk over a large module
    found = [n for n in pos if isinstance(n, cst.ClassDef) and n.name.value == name]
    found.sort(key=lambda c: (pos[c].start.line, pos[c].start.column))
    at_line = [c for c in found if pos[c].start.line <= line <= pos[c].end.line]
    pick = at_line or found
    if len(pick) != 1:
        raise CannotFix(f"{where}: found {len(pick)} classes named {name}")
    return pick[0]


def method(cls: cst.ClassDef, name: str) -> cst.FunctionDef | None:
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
    return next((s for s in body if isinstance(s, cst.FunctionDef) and s.name.value == name), None)


def simple_name(qualname: str) -> str:
    return qualname.rsplit(".", 1)[-1]

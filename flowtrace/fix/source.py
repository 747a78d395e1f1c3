"""The tree a fix run edits: files read once, earlier accepted edits applied on top.

Codemods read through :class:`Sources`, so a second patch of the same file starts from the
first one's result and the two compose. libcst helpers to find a class and its methods by
name and line sit here too, shared by the codemods.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

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

    def accept(self, edits: tuple[FileEdit, ...]) -> None:
        for e in edits:
            self.current[e.path] = e.after

    def edit(self, relative: str, after: str) -> FileEdit:
        before = self.text(relative)
        if after == before:
            raise CannotFix(f"{relative}: the codemod changed nothing")
        return FileEdit(relative, before, after)


def parse(text: str, where: str) -> MetadataWrapper:
    try:
        return MetadataWrapper(cst.parse_module(text))
    except cst.ParserSyntaxError as exc:
        raise CannotFix(f"{where}: libcst cannot parse it ({exc.message})") from None


def positions(wrapper: MetadataWrapper) -> dict[cst.CSTNode, CodeRange]:
    return dict(wrapper.resolve(PositionProvider))


def classes_named(module: cst.Module, name: str) -> Iterator[cst.ClassDef]:
    """Classes called ``name`` at any depth (a fixture may nest them under ``if``)."""
    found: list[cst.ClassDef] = []

    class _Find(cst.CSTVisitor):
        def visit_ClassDef(self, node: cst.ClassDef) -> bool:
            if node.name.value == name:
                found.append(node)
            return True

    module.visit(_Find())
    return iter(found)


def one_class(module: cst.Module, name: str, line: int, pos: dict[cst.CSTNode, CodeRange], where: str) -> cst.ClassDef:
    """The class ``name`` defined at ``line`` (the facts' location), else the only one so named."""
    found = list(classes_named(module, name))
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

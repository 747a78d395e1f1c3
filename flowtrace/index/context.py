"""What the per-file analysers share: the file being read and the class being read.

The visitor builds one :class:`FileContext` per module and one :class:`ClassInfo` per
class; the setter, loop, helper and site analysers only read them. Keeping both here, below
every analyser, is what lets ``visitors`` import the analysers without the analysers
importing ``visitors`` back (even for types only).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from flowtrace.engines.profiles import Conventions
from flowtrace.index.syntax import FunctionNode, SourceText
from flowtrace.model import facts as F


@dataclass
class ClassInfo:
    """A class of the module: its node, module-qualified name, and its methods by name (the
    first definition of a name wins, as the visitor meets them). The visitor fills
    ``methods`` while it walks the class body, so this one is not frozen."""

    node: ast.ClassDef
    qualname: str
    name: str
    methods: dict[str, FunctionNode] = field(default_factory=dict)


class FileContext:
    """One module's path, text, profile conventions and import table, with the few ways an
    analyser turns a node into a fact's fields (location, source text, qualified name)."""

    def __init__(
        self,
        path: str,
        modname: str,
        text: SourceText,
        conv: Conventions,
        imports: dict[str, str],
        local_classes: dict[str, str],
    ) -> None:
        self.path = path
        self.modname = modname
        self.text = text
        self.lines = text.lines
        self.conv = conv
        self.imports = imports
        self.local_classes = local_classes

    def text_of(self, node: ast.stmt) -> str:
        """The node's source lines (from its first line, a definition's ``def`` line, to its last)."""
        return "\n".join(self.lines[node.lineno - 1 : node.end_lineno])

    def line(self, node: ast.AST) -> int:
        return int(getattr(node, "lineno", 0))

    def start(self, node: ast.AST) -> tuple[int, int]:
        """(line, column in characters) where the node starts."""
        return self.line(node), self.text.character_column(node)

    def loc(self, node: ast.AST) -> F.Location:
        return F.Location(self.path, self.line(node))

    def code(self, node: ast.AST) -> str:
        """The node's exact source text."""
        return self.text.segment(node).strip()

    def resolve(self, name: str) -> str:
        """Qualify a dotted name through the module's imports and local classes."""
        head, _, rest = name.partition(".")
        if head in self.imports:
            base = self.imports[head]
            return f"{base}.{rest}" if rest else base
        if head in self.local_classes and not rest:
            return self.local_classes[head]
        return name


__all__ = ["ClassInfo", "FileContext"]

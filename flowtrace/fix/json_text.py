"""Edit one member of a JSON document's text and keep every other byte.

``compat --fix`` rewrites a draft's ``config.json``: the file is the user's (written by a
trainer, kept in git, diffed in review), so the edit is what a person would make by hand. The
value of one member is replaced in place, or a member is added after its last sibling, written
in the file's own style: one-line or one-item-per-line arrays as the old value was, the
indentation unit (spaces or tabs) and line ending (LF or CRLF) of the file, ``": "`` as its
members have it; the final newline (or its absence) is untouched. ``json.dumps`` of the whole
document would re-indent every line and split every one-line array.

Positions come from the stdlib decoder (``raw_decode`` gives where a key or a value ends), so
what is located is exactly what ``json.loads`` reads (the last of duplicate keys).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

_DECODER = json.JSONDecoder()
_WS = " \t\r\n"


class JsonTextError(ValueError):
    """The text is not the JSON object the edit expects (the caller says which file)."""


@dataclass(frozen=True, slots=True)
class Member:
    key: str
    key_start: int  # the key's opening quote
    colon: str  # what stands between the key and its value (': ', ':')
    value_start: int
    value_end: int


@dataclass(frozen=True, slots=True)
class Style:
    """How the file writes JSON: its line ending, indentation unit (None: one line) and
    whether it writes arrays one item a line (``json.dumps(indent=...)``) and never on one."""

    newline: str
    unit: str | None
    split_arrays: bool

    @classmethod
    def of(cls, text: str) -> Style:
        match = re.search(r"\n([ \t]+)\S", text)
        split = re.search(r"\[[ \t]*\r?\n", text) is not None and re.search(r"\[[^\[\]{}\n]+\]", text) is None
        return cls("\r\n" if "\r\n" in text else "\n", match.group(1) if match else None, split)


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def _members(text: str, start: int) -> tuple[list[Member], int]:
    """The members of the object whose ``{`` is at ``start``, and the offset of its ``}``."""
    i = _skip(text, start + 1)
    out: list[Member] = []
    if text.startswith("}", i):
        return out, i
    while True:
        if not text.startswith('"', i):
            raise JsonTextError(f"expected a key at offset {i}")
        key, after = _DECODER.raw_decode(text, i)
        colon = _skip(text, after)
        if not text.startswith(":", colon):
            raise JsonTextError(f"expected ':' at offset {colon}")
        colon_end = _skip(text, colon + 1)
        _, end = _DECODER.raw_decode(text, colon_end)
        out.append(Member(key, i, text[after:colon_end], colon_end, end))
        i = _skip(text, end)
        if text.startswith(",", i):
            i = _skip(text, i + 1)
        elif text.startswith("}", i):
            return out, i
        else:
            raise JsonTextError(f"expected ',' or '}}' at offset {i}")


def _line_indent(text: str, pos: int) -> str:
    """The whitespace the line holding ``pos`` starts with."""
    line_start = text.rfind("\n", 0, pos) + 1
    match = re.match(r"[ \t]*", text[line_start:])
    return match.group(0) if match else ""


def _dump(value: Any, style: Style, indent: str, inline: bool) -> str:
    """``value`` as the file would write it at a line indented by ``indent``: objects one member
    a line (unless the file or the place is one line), arrays on one line unless the file writes
    every array one item a line."""
    if isinstance(value, dict) and value and not inline and style.unit is not None:
        inner = indent + style.unit
        body = ("," + style.newline).join(
            f"{inner}{json.dumps(k, ensure_ascii=False)}: {_dump(v, style, inner, False)}" for k, v in value.items()
        )
        return "{" + style.newline + body + style.newline + indent + "}"
    if isinstance(value, dict):
        return (
            "{"
            + ", ".join(
                f"{json.dumps(k, ensure_ascii=False)}: {_dump(v, style, indent, True)}" for k, v in value.items()
            )
            + "}"
        )
    if isinstance(value, list) and value and style.split_arrays and not inline and style.unit is not None:
        inner = indent + style.unit
        return (
            "["
            + style.newline
            + ("," + style.newline).join(inner + _dump(v, style, inner, True) for v in value)
            + style.newline
            + indent
            + "]"
        )
    if isinstance(value, list):
        return "[" + ", ".join(_dump(v, style, indent, True) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def _replacement(text: str, member: Member, value: Any, style: Style) -> str:
    """A new value for ``member`` in the old value's shape: a list written one item a line
    stays so (same item and bracket indentation), a one-line list keeps its separator."""
    old = text[member.value_start : member.value_end]
    if isinstance(value, list) and all(not isinstance(v, (list, dict)) for v in value) and old.startswith("["):
        items = [json.dumps(v, ensure_ascii=False) for v in value]
        if "\n" in old and items:
            first = re.search(r"\n([ \t]*)\S", old)
            item_indent = first.group(1) if first else _line_indent(text, member.key_start) + (style.unit or "  ")
            close_indent = _line_indent(text, member.value_end - 1)
            return (
                "["
                + style.newline
                + ("," + style.newline).join(item_indent + i for i in items)
                + style.newline
                + close_indent
                + "]"
            )
        separator = "," if re.search(r",\S", old) else ", "
        pad = " " if re.match(r"\[ \S", old) else ""
        return "[" + pad + separator.join(items) + pad + "]" if items else "[]"
    inline = "\n" not in old if old.startswith("{") else style.unit is None  # an object keeps its shape
    return _dump(value, style, _line_indent(text, member.key_start), inline)


def _insert(text: str, start: int, close: int, members: list[Member], key: str, value: Any, style: Style) -> str:
    """``text`` with ``"key": value`` added to the object spanning ``start``..``close``, after
    its last member (in its members' indentation and colon style)."""
    one_line = "\n" not in text[start:close]
    if members:
        last = members[-1]
        indent = _line_indent(text, last.key_start)
        member = f"{json.dumps(key, ensure_ascii=False)}{last.colon}{_dump(value, style, indent, one_line)}"
        joint = "," + (" " if one_line else style.newline + indent)
        return text[: last.value_end] + joint + member + text[last.value_end :]
    if style.unit is None:  # a one-line document: stay on one line
        return (
            text[: start + 1] + f"{json.dumps(key, ensure_ascii=False)}: {_dump(value, style, '', True)}" + text[close:]
        )
    outer = _line_indent(text, start)
    inner = outer + style.unit
    member = f"{json.dumps(key, ensure_ascii=False)}: {_dump(value, style, inner, False)}"
    return text[: start + 1] + style.newline + inner + member + style.newline + outer + text[close:]


def set_member(text: str, dotted: str, value: Any) -> str:
    """``text`` with ``doc[a][b] = value`` for ``"a.b"`` (missing objects are added, last in
    their parent), every byte outside the edited value (or the added member) unchanged."""
    style = Style.of(text)
    start = _skip(text, 0)
    if not text.startswith("{", start):
        raise JsonTextError("the document is not a JSON object")
    parts = dotted.split(".")
    for depth, part in enumerate(parts):
        members, close = _members(text, start)
        found = [m for m in members if m.key == part]
        if not found:
            nested: Any = value
            for later in reversed(parts[depth + 1 :]):
                nested = {later: nested}
            return _insert(text, start, close, members, part, nested, style)
        member = found[-1]  # what json.loads keeps
        if depth == len(parts) - 1 or not text.startswith("{", member.value_start):
            if depth < len(parts) - 1:  # a scalar where an object should be: replace it whole
                nested = value
                for later in reversed(parts[depth + 1 :]):
                    nested = {later: nested}
                value = nested
            return text[: member.value_start] + _replacement(text, member, value, style) + text[member.value_end :]
        start = member.value_start
    raise AssertionError("unreachable")  # pragma: no cover

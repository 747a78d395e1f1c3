"""The comments that speak to flowtrace (``# flowtrace: ignore[FT001]``), read where the bytes are.

A suppression is a comment token, not a line: read with :mod:`tokenize`, a docstring that merely
mentions the syntax is not one. A file that does not tokenize is read a line at a time instead
(the text from each line's first ``#``), so a half-written file keeps its suppressions.

The index worker that holds a file's bytes reads them here once, and the lint runner takes them
from the file's facts instead of reading every indexed file from disk again; the runner reads
from disk, through the same :func:`comments`, only the files the index did not read whole. What a
comment means (which codes it names) is the runner's business: this module only finds them.
"""

from __future__ import annotations

import io
import tokenize

from flowtrace.index.syntax import decode

# What every comment that speaks to flowtrace contains. A gate, not a reader: a comment without
# it is never a suppression, so leaving it out changes no answer.
MARK = "flowtrace:"
_MARK_BYTES = MARK.encode()

Comments = tuple[tuple[int, str], ...]


def comments(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment; the text from the first '#' of each line holding one when
    the file does not tokenize."""
    try:
        return [
            (tok.start[0], tok.string)
            for tok in tokenize.generate_tokens(io.StringIO(source).readline)
            if tok.type == tokenize.COMMENT
        ]
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return [(n, line[line.index("#") :]) for n, line in enumerate(source.splitlines(), 1) if "#" in line]


def flowtrace_comments(data: bytes) -> Comments:
    """(line, text) of the comments of a file's bytes that hold :data:`MARK`. Most files hold it
    nowhere: one byte search answers for them. The test on bytes agrees with one on the decoded
    text for every encoding Python accepts for source (they spell ASCII as ASCII)."""
    if _MARK_BYTES not in data:
        return ()
    return tuple((line, text) for line, text in comments(decode(data)) if MARK in text)

"""The one shape of every error line the command line prints: ``flowtrace: error: ...``."""

from __future__ import annotations


def error_line(message: str) -> str:
    """``flowtrace: error: <first line of message>``: scripts and people grep for the prefix."""
    first = message.strip().splitlines()[0] if message.strip() else "unknown error"
    return f"flowtrace: error: {first}"


def internal_error_line(exc: BaseException) -> str:
    """An unexpected exception as one error line (type and first line), never a traceback."""
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return error_line(f"internal error: {type(exc).__name__}{': ' + detail if detail else ''}")

"""The one shape of every error line the command line prints (shared by every command module)."""

from __future__ import annotations


def error_line(message: str) -> str:
    """The one shape of every error the command line prints."""
    first = message.strip().splitlines()[0] if message.strip() else "unknown error"
    return f"flowtrace: error: {first}"


def internal_error_line(exc: BaseException) -> str:
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return error_line(f"internal error: {type(exc).__name__}{': ' + detail if detail else ''}")

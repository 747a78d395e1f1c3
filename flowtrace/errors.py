"""The errors a user can cause, at the bottom of the stack: every stage imports this, it imports nothing.

Each is reported by the CLI as one line, ``flowtrace: error: <message>``, with exit code 2; the
message names the file (or option) and, where one exists, the fix.
"""

from __future__ import annotations


class UsageError(Exception):
    """A user mistake (missing path, bad option value, bad config): one clear line, exit code 2."""


class ProfileError(UsageError):
    """An engine profile or training convention that cannot be loaded (names the file and key)."""

"""One answer kept for the last object asked about, by identity.

A scan asks the same question of one project (or one conventions object) thousands of times:
its serving plan, its layer runs, its traces, its profile names. Those objects are never changed
after they are built, so an answer stays right for as long as the same object is asked; keeping
only the last one bounds the memory however many projects a process (the test suite) builds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class LastMemo(Generic[K, V]):
    """``build(key)`` once for the last ``key`` asked about (compared by identity, not equality:
    an equal but distinct project is another scan's)."""

    __slots__ = ("_entry",)

    def __init__(self) -> None:
        self._entry: tuple[K, V] | None = None

    def get(self, key: K, build: Callable[[K], V]) -> V:
        entry = self._entry
        if entry is None or entry[0] is not key:
            entry = self._entry = (key, build(key))
        return entry[1]


__all__ = ["LastMemo"]

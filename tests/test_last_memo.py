"""The one-entry memo the analyses keep per project (analysis/last_memo.py)."""

from __future__ import annotations

from flowtrace.analysis.last_memo import LastMemo


def test_builds_once_per_object_and_forgets_the_one_before():
    built: list[list[int]] = []

    def build(key: list[int]) -> int:
        built.append(key)
        return len(built)

    memo: LastMemo[list[int], int] = LastMemo()
    first, equal = [1], [1]  # equal, but another object: another project's answer
    assert (memo.get(first, build), memo.get(first, build)) == (1, 1)
    assert memo.get(equal, build) == 2  # compared by identity, not equality
    assert memo.get(first, build) == 3  # only the last object is kept
    assert [k is first for k in built] == [True, False, True]

"""Which speculative method a draft config is for: what ``compat`` answers for when no
``--method`` is given.

A draft says which method trained it only through what it holds: its ``architectures`` (the
engine's draft class of one method) or keys only that method's drafts carry (a DFlash draft's
``dflash_config``). Both lists are profile data (``[methods.<name>] draft_architectures``,
``detect_keys``); an architecture outranks a key, because a draft may carry another method's
keys beside its own (the engines read them in order, docs/profiles.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from flowtrace.engines.methods import SpecMethod
from flowtrace.sources.configs import lookup


@dataclass(frozen=True, slots=True)
class MethodChoice:
    """The method a draft config is for, and the words that say why."""

    method: SpecMethod
    why: str


def _has_dotted(doc: dict[str, object], dotted: str) -> bool:
    """The draft holds the key at all (a null value counts: the key marks the format)."""
    parent, _, last = dotted.rpartition(".")
    container = lookup(doc, parent) if parent else doc
    return isinstance(container, dict) and last in container


def draft_method(methods: Iterable[SpecMethod], draft: dict[str, object]) -> MethodChoice | None:
    """The first declared method whose draft architectures name the draft's, else the first
    whose detect keys it holds; None when nothing in the draft names a method."""
    methods = tuple(methods)
    listed = draft.get("architectures")  # a JSON value: only a list names architectures
    architectures = [a for a in listed if isinstance(a, str)] if isinstance(listed, list) else []
    for m in methods:
        hit = next((a for a in architectures if a in m.draft_architectures), None)
        if hit is not None:
            return MethodChoice(m, f"the draft's architecture {hit} is a {m.title} draft class")
    for m in methods:
        key = next((k for k in m.detect_keys if _has_dotted(draft, k)), None)
        if key is not None:
            return MethodChoice(m, f"the draft config holds {key}")
    return None


__all__ = ["MethodChoice", "draft_method"]

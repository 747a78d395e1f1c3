"""Rule selection by code prefix, ruff's semantics: the one implementation ``check`` and the API share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence


@dataclass(frozen=True)
class SelectionLayer:
    select: tuple[str, ...] | None  # None: this layer does not reset the selection
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()


def specificity(code: str, selectors: Iterable[str]) -> int:
    best = 0
    for s in selectors:
        if s == "ALL":
            best = max(best, 1)
        elif code.startswith(s):
            best = max(best, len(s) + 1)
    return best


def resolve_selection(codes: Iterable[str], layers: Sequence[SelectionLayer]) -> frozenset[str]:
    """Enabled codes: every rule, then each layer on top (ruff's semantics).

    A layer with ``select`` starts over from it; a layer without one keeps what the layer
    below enabled and adds ``extend-select`` / removes ``ignore``. Within a layer a code
    matched by both select and ignore follows the more specific (longer) prefix, ignore
    winning a tie.
    """
    codes = tuple(codes)
    enabled = set(codes)
    for layer in layers:
        chosen = set()
        for code in codes:
            sel = specificity(code, (layer.select or ()) + layer.extend_select)
            ign = specificity(code, layer.ignore)
            if layer.select is not None:
                on = sel > ign
            elif sel > ign:
                on = True
            elif ign > 0:
                on = False
            else:
                on = code in enabled
            if on:
                chosen.add(code)
        enabled = chosen
    return frozenset(enabled)


def selected_codes(codes: Iterable[str], select: Sequence[str] = (), ignore: Sequence[str] = ()) -> frozenset[str]:
    """One command-line layer over every rule: what ``api.findings(select=, ignore=)`` runs."""
    return resolve_selection(codes, [SelectionLayer(tuple(select) or None, (), tuple(ignore))])

"""Which model classes are EAGLE-3 drafts: they consume the aux hidden states, not capture them.

A draft inherits its target's capture setter (``LlamaForCausalLMEagle3(LlamaForCausalLM)``) but
holds a draft model whose layers never capture, so the capture resolution calls it *broken*.
That verdict is right about capture and wrong about the class: a reader of the matrix needs
to see "draft", not a defect. The signal is structural, never a name: the class, or a class
it builds in ``__init__`` (``self.model = DraftModel(config)``), defines the profile's fc
projection over the concatenated states (an :class:`~flowtrace.model.facts.FcFact`), or it
subclasses a draft.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from flowtrace.model import facts as F

if TYPE_CHECKING:
    from flowtrace.analysis.class_lookup import ClassLookup


def draft_classes(files: Iterable[F.FileFacts]) -> frozenset[str]:
    """Qualified names of the classes that own the draft fc, build a class that does, or
    subclass such a class."""
    classes = [cls for ff in files for cls in ff.classes]
    fc_owners = {fc.class_qualname for ff in files for fc in ff.fc_definitions}
    drafts = fc_owners | {cls.qualname for cls in classes if any(a.callee in fc_owners for a in cls.assignments)}
    changed = True
    while changed:  # subclasses of drafts, to a fixpoint (a chain of any depth)
        grown = {cls.qualname for cls in classes if cls.qualname not in drafts and any(b in drafts for b in cls.bases)}
        drafts |= grown
        changed = bool(grown)
    return frozenset(drafts)


_LITERAL_COUNT = re.compile(r"^\s*(?:[\w.()]+\s*\*\s*(\d+)|(\d+)\s*\*\s*[\w.()]+)\s*$")


@dataclass(frozen=True, slots=True)
class FixedCount:
    """A draft class whose fc is sized for a literal number of target states
    (``target_hidden_size * 3``): it loads only drafts that concatenate that many."""

    qualname: str  # the class the engine registers for the draft
    fc: F.FcFact
    states: int


def fixed_state_count(project: ClassLookup, qualname: str) -> FixedCount | None:
    """The literal state count of the fc a draft class builds (in its MRO, or in a class its
    ``__init__`` builds), when the fc's in_features is ``<width> * N``; None when the count
    comes from the config (``num_aux_hidden_states``, the length of the ids) or is unknown."""
    owners = list(project.mro(qualname))
    for q in list(owners):
        cls = project.classes.get(q)
        owners += [a.callee for a in cls.assignments] if cls is not None else []
    for owner in owners:
        fc = project.fcs.get(owner)
        match = _LITERAL_COUNT.match(fc.in_features or "") if fc is not None else None
        if fc is not None and match:
            return FixedCount(qualname, fc, int(match.group(1) or match.group(2)))
    return None

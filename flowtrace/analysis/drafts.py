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

from collections.abc import Iterable

from flowtrace.model import facts as F


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

"""compat's JSON (``flowtrace.compat/1``): the verdict's records, with the words of
:mod:`flowtrace.render.compat_words` where the schema has sentences."""

from __future__ import annotations

from typing import Any

from flowtrace.analysis.compat import CompatResult
from flowtrace.analysis.suggest import outcome, suggestion_json
from flowtrace.render.compat_words import differences_text, slot_why
from flowtrace.sources.checkpoint import checkpoint_json


def compat_json(result: CompatResult) -> dict[str, Any]:
    from flowtrace.analysis.trace import trace_json

    doc = {
        "schema": "flowtrace.compat/1",
        "verdict": result.verdict,
        "model": result.model,
        "architecture": result.architecture,
        "num_layers": result.num_layers,
        "hidden_size": result.hidden_size,
        "trained_with": result.convention,
        "draft_ids": list(result.draft_ids) if result.draft_ids is not None else None,
        # where draft_ids were read (null: the convention's default ids, the draft names none of its own)
        "draft_ids_key": result.draft_ids_key,
        "engine_ids": list(result.engine_ids) if result.engine_ids is not None else None,
        "engine_key": result.engine_key,
        "trained_boundaries": list(result.trained),
        "served_boundaries": list(result.served) if result.served is not None else None,
        "outcome": outcome(result.trace),
        "differences": differences_text(result),
        "slots": [
            {
                "slot": d.slot,
                "trained": d.trained,
                "served": d.served,
                "decided_at": str(d.decided_at) if d.decided_at is not None else None,
                "why": slot_why(d, result.num_layers),
            }
            for d in result.slots
        ],
        "id_paths": [
            {"draft_id": p.draft_id, "trained": p.trained, "engine_index": p.engine_index, "served": p.served}
            for p in result.id_paths
        ],
        "suggestions": [suggestion_json(s) for s in result.suggestions],
        "engine_default": result.engine_default,
        "training_default": result.training_default,
        "draft_checkpoint": (
            checkpoint_json(result.checkpoint, result.hidden_size) if result.checkpoint is not None else None
        ),
        "notes": list(result.notes),
        "warnings": list(result.warnings),
        "no_fix": result.no_fix,
        "trace": trace_json(result.trace),
    }
    if result.method is not None:  # added only for a method other than the profiles' default
        doc["method"] = {"label": result.method, "why": result.method_why}
    return doc

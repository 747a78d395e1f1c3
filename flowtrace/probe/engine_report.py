"""probe-engine documents as the report's probe input: one runtime-confirmed / refuted badge per model.

``flowtrace report --probe-engine P`` reads ``flowtrace.probe-engine/1`` documents (one, a list, or
several files) and hands the HTML renderer the merged probe shape it already draws (a ``results``
list of runs, each naming its model and a verdict): the renderer needs no second code path, and a
model probed with several id sets shows its worst run. Torch-free and engine-free.
"""

from __future__ import annotations

from typing import Any

from flowtrace.probe.engine import SCHEMA

CONFIRMED, REFUTED = "runtime-confirmed", "runtime-refuted"

# A JSON object read back from a user's file: any release's /1 document, so every field is read
# with ``.get`` (the EngineDocument type says what this release writes, not what a file holds).
JSONObject = dict[str, Any]


def engine_documents(doc: Any) -> list[JSONObject]:
    """The probe-engine documents inside one parsed JSON value (a document or a list of them)."""
    docs = doc if isinstance(doc, list) else [doc]
    return [d for d in docs if isinstance(d, dict) and str(d.get("schema", "")).startswith(SCHEMA)]


def as_probe_results(docs: list[JSONObject]) -> list[JSONObject]:
    """One probe run per probe-engine case, in the shape the report's probe panel reads."""
    out: list[JSONObject] = []
    for d in docs:
        static, observed = d.get("static") or {}, d.get("observed") or {}
        seen = [s.get("boundary") for s in observed.get("slots") or []]
        ids = d.get("layer_ids")
        out.append(
            {
                "schema": "flowtrace.probe/1",
                "command": "engine",
                "verdict": CONFIRMED if d.get("agree") else REFUTED,
                "target": {
                    "name": (
                        f"{d.get('engine')} {d.get('engine_version')} {d.get('architecture')} (tiny random,"
                        f" L={d.get('num_layers')})"
                    ),
                    "num_layers": d.get("num_layers"),
                },
                "claim": {
                    "model": d.get("architecture"),
                    "boundaries": static.get("boundaries"),
                    "source": "flowtrace trace of the installed engine",
                },
                "boundaries": seen if observed.get("outcome") in ("captures", "raises") and seen else None,
                "reason": (
                    f"ids {ids if ids is not None else 'none (engine default)'}; runtime {observed.get('outcome')}"
                    + (
                        f" at {observed.get('raised_at')}: {observed.get('message')}"
                        if observed.get("raised_at")
                        else ""
                    )
                    + f"; static {static.get('outcome')}"
                ),
                "device": "engine",
            }
        )
    return out


def merged_probe(docs: list[JSONObject], probe: JSONObject | None = None) -> JSONObject:
    """A merged probe document with every probe-engine run (and the runs of ``probe``, if given)."""
    runs: list[JSONObject] = []
    if probe is not None:
        runs.extend(probe["results"] if isinstance(probe.get("results"), list) else [probe])
    runs.extend(as_probe_results(docs))
    return {"schema": "flowtrace.probe/1", "results": runs}


__all__ = ["CONFIRMED", "REFUTED", "as_probe_results", "engine_documents", "merged_probe"]

"""``probe merge``: many probe results, one document with a confirmed / refuted verdict per model.

One ``probe capture --expect-trace`` run checks one model and one id set; a CI job or the
agreement test runs many. The merged document keeps every run under ``results`` (unchanged, so
the HTML report can show each) and sums them up per model under ``models``: a model is
``refuted`` when any of its runs is, ``confirmed`` when all are, else ``inconclusive``.
Torch-free: it only reads JSON.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from flowtrace.probe.errors import ProbeError
from flowtrace.probe.results import CONFIRMED, INCONCLUSIVE, REFUTED, SCHEMA

MERGE = "merge"


def run_status(doc: dict[str, Any]) -> str:
    """The verdict a run gives its model: a draft's claim verdict, else the capture verdict."""
    if doc.get("command") == "draft" and doc.get("claim"):
        return str(doc.get("claim_verdict") or doc.get("verdict") or INCONCLUSIVE)
    return str(doc.get("verdict") or INCONCLUSIVE)


def run_model(doc: dict[str, Any]) -> str | None:
    claim: dict[str, Any] = doc["claim"] if isinstance(doc.get("claim"), dict) else {}
    model = doc.get("model") or claim.get("model")
    return None if model is None else str(model)


def _model_verdict(statuses: list[str]) -> str:
    if REFUTED in statuses:
        return REFUTED
    if statuses and all(s == CONFIRMED for s in statuses):
        return CONFIRMED
    return INCONCLUSIVE


def merge_documents(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """One ``flowtrace.probe/1`` document of command ``merge`` (merged documents flatten)."""
    runs: list[dict[str, Any]] = []
    for d in docs:
        runs += list(d.get("results") or []) if d.get("command") == MERGE else [d]
    by_model: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        by_model.setdefault(run_model(r) or "(no model named)", []).append(r)
    models = []
    for name, rs in sorted(by_model.items()):
        statuses = [run_status(r) for r in rs]
        models.append({
            "model": name,
            "verdict": _model_verdict(statuses),
            "runs": len(rs),
            "counts": dict(sorted(Counter(statuses).items())),
            "layer_ids": [(r.get("claim") or {}).get("layer_ids") for r in rs],
        })
    summary = Counter(m["verdict"] for m in models)
    return {
        "schema": SCHEMA,
        "command": MERGE,
        "models": models,
        "summary": {k: summary.get(k, 0) for k in (CONFIRMED, REFUTED, INCONCLUSIVE)},
        "results": runs,
    }


def read_documents(paths: list[str]) -> list[dict[str, Any]]:
    docs = []
    for p in paths:
        try:
            d = json.loads(Path(p).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ProbeError(f"{p} does not exist") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ProbeError(f"{p}: cannot read a probe result ({exc})") from None
        if not isinstance(d, dict) or not str(d.get("schema", "")).startswith("flowtrace.probe/"):
            raise ProbeError(f"{p}: not a flowtrace.probe/1 document (write it with --format json)")
        docs.append(d)
    return docs

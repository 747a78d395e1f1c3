"""Boundaries a draft may ask for that this engine can never capture (FT009, FT010, FT011)."""

from __future__ import annotations

import re
from typing import Iterator

from flowtrace.model import facts as F
from flowtrace.checks.base import Example, Finding, Rule
from flowtrace.analysis.trace import trace_row
from flowtrace.model.facts import Outcome

PROBE_LAYERS = 32  # any realistic layer count works: reachability does not depend on it


def _groups(result):
    """Registered rows with a decidable capture path, grouped by (setter, site) so a base class
    shared by many registered subclasses is reported once."""
    groups: dict[tuple, list] = {}
    for row in result.rows:
        c = row.capture
        if not row.registered or c is None or c.site is None or c.point == F.UNKNOWN:
            continue
        groups.setdefault((c.chain[0].location, c.site.location), []).append(row)
    return groups


def _reaches(result, row, ids, boundary) -> bool:
    traced = trace_row(result.project, row, ids, PROBE_LAYERS)
    return traced.boundaries is not None and boundary in traced.boundaries


def _names(rows) -> str:
    names = sorted(r.name for r in rows)
    return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")


class UnreachableEmbedding(Rule):
    code = "FT009"
    name = "unreachable-embedding"
    severity = "warning"
    summary = "The embedding output (boundary 0) cannot be captured, or not with the id drafts use for it (-1)."
    rationale = (
        "SpecForge-style drafts name the embedding as id -1 (output of 'layer -1'). Under an identity "
        "transform -1 never equals a loop index, and a loop that records layer outputs never sees the "
        "embedding: such a draft silently gets one state fewer, or a shifted one."
    )
    fix = "Capture before layer i (or at the embedding) and map -1 to index 0, as the plus-one setters do."
    valid = (Example("self.model.layers_to_capture = [v + 1 for v in layer_ids]  # -1 -> 0, captured before layer 0"),)
    invalid = (Example("self.model.layers_to_capture = list(layer_ids)  # -1 is never a loop index"),)

    def check(self, result) -> Iterator[Finding]:
        # One finding per setter and kind of problem: an interface setter shared by dozens of
        # models (vLLM's SupportsEagle3) is one defect, not one per model file.
        merged: dict[tuple, list] = {}
        for (setter_loc, _), rows in _groups(result).items():
            row = rows[0]
            if _reaches(result, row, [-1], 0):
                continue
            raising = next((t for t in (trace_row(result.project, row, ids, PROBE_LAYERS) for ids in ([-1], [0])) if t.outcome == Outcome.RAISES), None)
            kind = "minus-one" if _reaches(result, row, [0], 0) else "raises" if raising is not None else "never"
            entry = merged.setdefault((str(setter_loc), kind), [setter_loc, row, [], raising])
            entry[2].extend(rows)
        for (_, kind), (setter_loc, row, rows, raising) in sorted(merged.items()):
            if kind == "raises":
                message = f"{_names(rows)}: asking for the embedding (b=0) raises: {raising.reason}"
            elif kind == "minus-one":
                message = f"{_names(rows)}: id -1 (the embedding in SpecForge/SGLang draft configs) is dropped; only id 0 reaches b=0 ({row.capture.effective_transform} transform)"
            else:
                message = f"{_names(rows)}: no id reaches the embedding (b=0): the capture point is {row.capture.point} and nothing is recorded before layer 0"
            yield self.finding(setter_loc, message, row.qualname, f"embedding:{kind}:{row.capture.effective_transform}")


class UnreachableLastLayer(Rule):
    code = "FT010"
    name = "unreachable-last-layer"
    severity = "info"
    summary = "The last layer's output (boundary L, before the final norm) cannot be captured."
    rationale = (
        "A loop that records each layer's input sees boundaries 0..L-1 only. A draft trained on the last "
        "layer's output (id L-1 as 'output of layer i', or HF index L-1+1) is served nothing for that slot."
    )
    fix = "Record the stream after the loop when the last index is requested (as some engines do with `if self.end_layer in ...`)."
    valid = (Example("for i in range(start, end):\n    ...\nif end in self.layers_to_capture:\n    aux.append(h + r)"),)
    invalid = (Example("for i in range(start, end):\n    if i in self.layers_to_capture:\n        aux.append(h + r)  # b = L is never reached\n    h, r = self.layers[i](h, r)"),)

    def check(self, result) -> Iterator[Finding]:
        L = PROBE_LAYERS
        for (_setter_loc, site_loc), rows in sorted(_groups(result).items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))):
            row = rows[0]
            if any(_reaches(result, row, [i], L) for i in (L - 1, L)):
                continue
            yield self.finding(site_loc, f"{_names(rows)}: the last layer's output (b=L) is never captured ({row.capture.point_note})", row.qualname, f"last:{row.capture.point}")


_INDEXING = re.compile(r"self\.(\w+)\[\s*(\w+)\s*\]")


class UnguardedLayerIndex(Rule):
    code = "FT011"
    name = "unguarded-layer-index"
    severity = "warning"
    summary = "A setter indexes the layer list with config ids without a range check."
    rationale = (
        "Draft ids come from a config file. Indexing self.layers with them raises IndexError for an "
        "out-of-range id and silently picks the wrong layer for a negative one (-1 is the last layer)."
    )
    fix = "Check 0 <= id < len(self.layers) before indexing, and reject or map negative ids explicitly."
    valid = (Example("for i in ids:\n    if 0 <= i < len(self.layers):\n        self.layers[i].capture = True"),)
    invalid = (Example("for layer_id in ids:\n    setattr(self.layers[layer_id], '_is_layer_to_capture', True)"),)

    def check(self, result) -> Iterator[Finding]:
        layers = result.project.conv.layers_attributes
        for ff in result.files:
            for s in ff.setters:
                for m in _INDEXING.finditer(s.source):
                    if m.group(1) not in layers or m.group(2).isdigit():
                        continue
                    if "len(self." in s.source or "range(" in s.source:
                        continue
                    yield self.finding(
                        s.location,
                        f"{s.class_qualname.rsplit('.', 1)[-1]}.{s.method} indexes self.{m.group(1)}[{m.group(2)}] with draft-config ids and no range check",
                        f"{s.class_qualname}.{s.method}",
                        m.group(0),
                    )
                    break

"""Id conventions that differ across the engine's model classes (FT007, FT008)."""

from __future__ import annotations

from collections import Counter
from typing import Iterator

from flowtrace.model import facts as F
from flowtrace.checks.base import Example, Finding, Rule


def _own_setters(result):
    """Setters that assign capture indices themselves (not pure delegation, not the engine's interface)."""
    providers = result.project.conv.interfaces | result.project.conv.holders
    # A setter reached only through another setter receives already-mapped indices.
    inner = {(s.class_qualname, s.method) for row in result.rows if row.capture for s in row.capture.chain[1:]}
    inner -= {(row.capture.chain[0].class_qualname, row.capture.chain[0].method) for row in result.rows if row.capture and row.registered}
    out = []
    for ff in result.files:
        for s in ff.setters:
            if s.class_qualname.rsplit(".", 1)[-1] in providers or s.id_transform == F.DELEGATES or s.parameter is None:
                continue
            if (s.class_qualname, s.method) in inner or not any(b.transform != "default" for b in s.branches):
                continue
            out.append(s)
    return out


class InconsistentIdTransform(Rule):
    code = "FT007"
    name = "inconsistent-id-transform"
    severity = "warning"
    summary = "A setter maps draft ids to capture indices differently from most of the engine's setters."
    rationale = (
        "One draft config is served by every model class of an engine. When most setters add one to "
        "explicit ids and a few use identity or a heuristic, the same draft is shifted by a layer on "
        "those classes and acceptance collapses without any error."
    )
    fix = "Use the engine's majority convention (named in the message), or document why this class differs."
    valid = (Example("self.model.layers_to_capture = [v + 1 for v in layer_ids]  # like its siblings"),)
    invalid = (Example("if layer_ids and layer_ids[0] == 1:\n    self.model.layers_to_capture = [v + 1 for v in layer_ids]\nelse:\n    self.model.layers_to_capture = list(layer_ids)"),)

    def check(self, result) -> Iterator[Finding]:
        setters = _own_setters(result)
        if len(setters) < 3:
            return
        counts = Counter(s.id_transform for s in setters)
        majority, n = counts.most_common(1)[0]
        if n * 2 <= len(setters):
            return
        for s in setters:
            if s.id_transform != majority:
                note = f" ({s.transform_note})" if s.transform_note else ""
                yield self.finding(
                    s.location,
                    f"{s.class_qualname.rsplit('.', 1)[-1]}.{s.method} uses {s.id_transform}{note}; {n} of {len(setters)} setters in this engine use {majority}",
                    f"{s.class_qualname}.{s.method}",
                    f"{s.id_transform}:{s.transform_note}",
                )


class InconsistentDefaultLayers(Rule):
    code = "FT008"
    name = "inconsistent-default-layers"
    severity = "info"
    summary = "A setter's default layer list differs from the engine's usual default."
    rationale = (
        "When the draft config gives no ids, each class falls back to its own default. A shifted default "
        "in one class (e.g. [1, n//2 - 1, n - 4] next to [2, n//2, n - 3]) serves a different layout for "
        "the same draft."
    )
    fix = "Use the engine's common default, or make the default explicit in the draft config."
    valid = (Example("self.model.layers_to_capture = [2, num_layers // 2, num_layers - 3]"),)
    invalid = (Example("layer_ids = [1, n // 2 - 1, n - 4]  # siblings use [2, n // 2, n - 3]"),)

    def check(self, result) -> Iterator[Finding]:
        setters = [s for s in _own_setters(result) if s.default_layers]
        if len(setters) < 3:
            return

        def norm(text: str) -> str:
            return "".join(text.replace("num_layers", "n").replace("num_hidden_layers", "n").split()).rstrip(",]").lstrip("[(").rstrip(")")

        counts = Counter(norm(s.default_layers or "") for s in setters)
        majority, n = counts.most_common(1)[0]
        if n * 2 <= len(setters):
            return
        example = next(s.default_layers for s in setters if norm(s.default_layers or "") == majority)
        for s in setters:
            if norm(s.default_layers or "") != majority:
                yield self.finding(
                    s.location,
                    f"{s.class_qualname.rsplit('.', 1)[-1]}.{s.method} defaults to {' '.join((s.default_layers or '').split())}; {n} of {len(setters)} setters default to {' '.join(example.split())}",
                    f"{s.class_qualname}.{s.method}",
                    s.default_layers or "",
                )

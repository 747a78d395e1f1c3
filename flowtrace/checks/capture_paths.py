"""Capture that happens on one path but not another, or captures the wrong tensor (FT006, FT012, FT013)."""

from __future__ import annotations

from typing import Iterator

from flowtrace.checks.base import Example, Finding, Rule


class CaptureFlagNeverSet(Rule):
    code = "FT006"
    name = "capture-flag-never-set"
    severity = "error"
    summary = "The forward only returns captured states when a flag is on, and the setter never turns it on."
    rationale = (
        "Engines gate the unpacking of (hidden, aux) on a flag such as capture_aux_hidden_states. A setter "
        "that writes the layer list but not the flag makes the model compute the captures and discard them."
    )
    fix = "Set the flag in the setter (as its siblings do) before writing the capture indices."
    valid = (Example("def set_eagle3_layers_to_capture(self, ids=None):\n    self.capture_aux_hidden_states = True\n    self.model.layers_to_capture = [i + 1 for i in ids]"),)
    invalid = (Example("def set_eagle3_layers_to_capture(self, ids=None):\n    self.model.layers_to_capture = [i + 1 for i in ids]  # flag stays False"),)

    def check(self, result) -> Iterator[Finding]:
        project = result.project
        flags = project.conv.flags
        if not flags:
            return
        uses = [u for ff in result.files for u in ff.attribute_uses if u.attribute in flags]
        seen = set()
        for row in result.rows:
            c = row.capture
            if c is None or not row.registered or c.problems:
                continue
            mro = set(project.mro(row.qualname))
            read = [u for u in uses if u.kind == "read" and u.class_qualname in mro and not u.function.split(".")[-1].startswith("set_")]
            if not read:
                continue
            setter_classes = {s.class_qualname for s in c.chain}
            written = [u for u in uses if u.kind == "write" and u.class_qualname in setter_classes | mro and u.function.split(".")[-1] in {s.method for s in c.chain}]
            if written:
                continue
            key = c.setter.location
            if key in seen:
                continue
            seen.add(key)
            yield self.finding(
                c.setter.location,
                f"{row.name}: {read[0].function} reads self.{read[0].attribute} to return the captured states, but {c.setter.method} never sets it",
                row.qualname,
                read[0].attribute,
            )


class CaptureSkippedOnPath(Rule):
    code = "FT012"
    name = "capture-skipped-on-path"
    severity = "warning"
    summary = "Another forward path of the same model runs the layers without capturing."
    rationale = (
        "Engines have several forward paths (split prefill, overlap, CPU or fast paths). When one of them "
        "runs the decoder layers without the capture, batches served by that path give the draft no "
        "auxiliary states, or stale ones from an earlier batch."
    )
    fix = "Capture on every path that runs the layers, or make sure the path is never used with speculative decoding."
    valid = (Example("def forward_split(self, h, start, end):\n    for i in range(start, end):\n        if i in self.layers_to_capture:\n            aux.append(h + r)\n        h, r = self.layers[i](h, r)"),)
    invalid = (Example("def forward_split(self, h, start, end):\n    for i in range(start, end):\n        h, r = self.layers[i](h, r)  # forward() captures; this path does not"),)

    def check(self, result) -> Iterator[Finding]:
        project = result.project
        capturing = {q for q, sites in project.sites.items() if sites}
        related: dict[str, str] = {}
        for row in result.rows:  # classes whose setter feeds a capturing holder
            c = row.capture
            if c is not None and c.holder:
                related.setdefault(row.qualname, c.holder)
        for ff in result.files:
            for loop in ff.layer_loops:
                if loop.captures:
                    continue
                owner = loop.class_qualname
                holder = owner if owner in capturing else related.get(owner)
                if holder is None or holder not in capturing:
                    continue
                site = project.sites[holder][0]
                yield self.finding(
                    loop.location,
                    f"{loop.function} runs the decoder layers without capturing, while {site.function} captures them",
                    loop.class_qualname,
                    loop.function,
                )


class CaptureWrongTensor(Rule):
    code = "FT013"
    name = "capture-wrong-tensor"
    severity = "warning"
    summary = "The captured tensor is not the residual stream: hidden_states without the residual, or a reference updated in place later."
    rationale = (
        "When layers return (hidden_states, residual), the residual stream at a boundary is their sum. "
        "Capturing hidden_states alone gives the draft only the last sub-layer's delta, a tensor it was "
        "never trained on."
    )
    fix = "Capture hidden_states + residual (or the helper that adds them), or clone() a tensor that is updated in place afterwards."
    valid = (Example("aux.append(hidden_states + residual)"),)
    invalid = (Example("hidden_states, residual = layer(hidden_states, residual)\nif i in self.layers_to_capture:\n    aux.append(hidden_states)"),)

    def check(self, result) -> Iterator[Finding]:
        for ff in result.files:
            for site in ff.capture_sites:
                if site.mutated_later:
                    yield self.finding(
                        site.location,
                        f"{site.function} stores a reference to `{site.captured_expression}` and later updates it in place "
                        f"(`{site.mutated_later}`): the captured state changes after it was recorded",
                        site.class_qualname,
                        f"{site.captured_expression}:{site.mutated_later}",
                    )
                    continue
                expr = site.captured_expression
                if not site.split_residual or not expr or site.uses_residual:
                    continue
                yield self.finding(
                    site.location,
                    f"{site.function} captures `{expr}` although its layers return (hidden_states, residual): the residual is missing",
                    site.class_qualname,
                    expr,
                )

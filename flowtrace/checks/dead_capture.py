"""Capture that is set up but never happens (FT004, FT005)."""

from __future__ import annotations

from typing import Iterator

from flowtrace.checks.base import Example, Finding, Rule
from flowtrace.model.problems import ProblemKind


class SetterWithoutCaptureLoop(Rule):
    code = "FT004"
    name = "setter-without-capture-loop"
    severity = "error"
    summary = "A setter writes a capture attribute that no forward reads."
    rationale = (
        "The setter stores the ids, but the model it writes to has no layer loop that checks them: the "
        "engine reports capture as enabled and hands the draft an empty or stale tensor."
    )
    kind = ProblemKind.SETTER_WITHOUT_CAPTURE_LOOP
    fix = "Add the capture to the model's layer loop (record the stream when the index is in the attribute), or write the attribute the loop reads."
    valid = (Example("def forward(self, h):\n    for i in range(self.start_layer, self.end_layer):\n        if i in self.layers_to_capture:\n            aux.append(h + r)\n        h, r = self.layers[i](h, r)"),)
    invalid = (Example("def set_eagle3_layers_to_capture(self, ids=None):\n    self.model.layers_to_capture = [i + 1 for i in ids]\n# self.model.forward never reads layers_to_capture"),)

    def check(self, result) -> Iterator[Finding]:
        seen = set()
        for row in result.rows:
            c = row.capture
            if c is None or c.site is not None or c.holder is None or c.inherited:
                continue  # an inherited setter works for the class that defines it
            key = (c.chain[-1].class_qualname, c.chain[-1].method)
            if key in seen:
                continue
            seen.add(key)
            last = c.chain[-1]
            yield self.finding(
                last.location,
                f"{last.class_qualname.rsplit('.', 1)[-1]}.{last.method} writes {', '.join(last.writes) or 'the capture attribute'}, "
                f"but {c.holder.rsplit('.', 1)[-1]} has no layer loop that reads it: nothing is captured for {row.name}",
                row.qualname,
                ",".join(last.writes),
            )


class ForwardDropsCapture(Rule):
    code = "FT005"
    name = "forward-drops-capture"
    severity = "warning"
    summary = "A subclass overrides forward and drops the capture its base class performs."
    rationale = (
        "The class inherits the capture attribute and setter, so capture looks supported, but its own "
        "forward runs the layers without recording anything."
    )
    kind = ProblemKind.FORWARD_DROPS_CAPTURE
    fix = "Keep the capture in the overriding forward, or call the base forward."
    valid = (Example("class Child(BaseModel):\n    pass  # inherits the capturing forward"),)
    invalid = (Example("class Child(BaseModel):\n    def forward(self, h):\n        for layer in self.layers:\n            h = layer(h)  # base forward captured; this one does not\n        return h"),)

    def check(self, result) -> Iterator[Finding]:
        project = result.project
        for qualname, cls in sorted(project.classes.items()):
            if "forward" not in cls.methods or project.sites.get(qualname):
                continue
            base = next((q for q in project.mro(qualname)[1:] if any(s.function.endswith(".forward") for s in project.sites.get(q, []))), None)
            if base is None:
                continue
            loops = [l for ff in project.files for l in ff.layer_loops if l.class_qualname == qualname and l.function.endswith(".forward")]
            if not loops:
                continue  # a forward that delegates (super().forward) keeps the capture
            yield self.finding(
                loops[0].location,
                f"{cls.name}.forward runs the layers without capturing, overriding {base.rsplit('.', 1)[-1]}.forward, which captures",
                qualname,
                f"{qualname}.forward",
            )

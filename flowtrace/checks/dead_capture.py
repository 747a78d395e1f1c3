"""Capture that is set up but never happens (FT004, FT005)."""

from __future__ import annotations

from typing import Iterator

from flowtrace.checks.base import Example, Finding, Rule
from flowtrace.analysis.graph import models_without_site, setter_written_holders
from flowtrace.model.facts import ProblemKind


class SetterWithoutCaptureLoop(Rule):
    code = "FT004"
    name = "setter-without-capture-loop"
    severity = "error"
    summary = "A setter writes a capture attribute that no forward reads."
    rationale = (
        "The setter stores the ids, but the model it writes to has no layer loop that checks them: the "
        "engine reports capture as enabled and hands the draft an empty or stale tensor."
    )
    kind = ProblemKind.NO_CAPTURE_SITE
    fix = "Add the capture to the model's layer loop (record the stream when the index is in the attribute), or write the attribute the loop reads."
    valid = (
        Example(
            """\
class ExModel(Module):
    def __init__(self, config):
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.layers = ModuleList([])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states):
        residual = None
        aux_hidden_states = []
        for i in range(self.start_layer, self.end_layer):
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states if residual is None else hidden_states + residual)
            hidden_states, residual = self.layers[i](hidden_states, residual)
        if len(aux_hidden_states) == 0:
            return hidden_states
        return hidden_states, aux_hidden_states


class ExForCausalLM(Module):
    def __init__(self, config):
        self.config = config
        self.model = ExModel(config)
        self.capture_aux_hidden_states = False

    def forward(self, input_ids, hidden_states):
        out = self.model(input_ids, hidden_states)
        if self.capture_aux_hidden_states:
            hidden_states, aux = out
            return hidden_states, aux
        return out

    def get_embed_and_head(self):
        return None, None

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.capture_aux_hidden_states = True
        if layer_ids is None:
            num_layers = self.config.num_hidden_layers
            self.model.layers_to_capture = [2, num_layers // 2, num_layers - 3]
        else:
            self.model.layers_to_capture = [val + 1 for val in layer_ids]

EntryClass = ExForCausalLM
"""
        ),
    )
    invalid = (
        Example(
            """\
class ExModel(Module):
    def __init__(self, config):
        self.layers = ModuleList([])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states):
        return hidden_states  # never reads layers_to_capture


class ExForCausalLM(Module):
    def __init__(self, config):
        self.config = config
        self.model = ExModel(config)
        self.capture_aux_hidden_states = False

    def forward(self, input_ids, hidden_states):
        out = self.model(input_ids, hidden_states)
        if self.capture_aux_hidden_states:
            hidden_states, aux = out
            return hidden_states, aux
        return out

    def get_embed_and_head(self):
        return None, None

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.capture_aux_hidden_states = True
        if layer_ids is None:
            num_layers = self.config.num_hidden_layers
            self.model.layers_to_capture = [2, num_layers // 2, num_layers - 3]
        else:
            self.model.layers_to_capture = [val + 1 for val in layer_ids]

EntryClass = ExForCausalLM
"""
        ),
    )

    def check(self, result) -> Iterator[Finding]:
        """A query over the graph: chains whose setter writes a holder (link 3) and reach no
        capture site (link 4); the message reads the row's links."""
        missing = models_without_site(result.graph)
        seen = set()
        for row in result.rows:
            chain = row.chain
            if row.qualname not in missing or chain is None or chain.holder is None or chain.holder.holder is None:
                continue
            if chain.transforms[0].owner != row.qualname:
                continue  # an inherited setter works for the class that defines it
            link = chain.transforms[-1]
            if (link.owner, link.method) in seen:
                continue
            seen.add((link.owner, link.method))
            last = result.project.setters[link.owner][link.method]
            holder = chain.holder
            yield self.finding(
                link.location,
                f"{link.owner.rsplit('.', 1)[-1]}.{link.method} writes {', '.join(last.writes) or 'the capture attribute'}, "
                f"but {holder.holder.rsplit('.', 1)[-1]} has no layer loop that reads it: nothing is captured for {row.name}",
                row.qualname,
                ",".join(last.writes),
                steps=(*(("setter", t.location) for t in chain.transforms), ("holder without a capture loop", holder.location)),
            )


class ForwardDropsCapture(Rule):
    code = "FT005"
    name = "forward-drops-capture"
    severity = "warning"
    summary = "A subclass that a capture setter feeds overrides forward and drops the capture its base class performs."
    rationale = (
        "The class inherits the capture attribute and setter, so capture looks supported, but its own "
        "forward runs the layers without recording anything."
    )
    kind = ProblemKind.FORWARD_DROPS_CAPTURE
    fix = "Keep the capture in the overriding forward, or call the base forward."
    valid = (
        Example(
            """\
from sglang.srt.models.sib_a import SibAForCausalLM, SibAModel

class ExModel(SibAModel):
    pass  # inherits the capturing forward


class ExForCausalLM(SibAForCausalLM):
    def __init__(self, config):
        super().__init__(config)
        self.model = ExModel(config)


EntryClass = ExForCausalLM
"""
        ),
    )
    invalid = (
        Example(
            """\
from sglang.srt.models.sib_a import SibAForCausalLM, SibAModel

class ExModel(SibAModel):
    def forward(self, input_ids, hidden_states):
        residual = None
        for i in range(self.start_layer, self.end_layer):
            hidden_states, residual = self.layers[i](hidden_states, residual)  # base forward captured; this one does not
        return hidden_states


class ExForCausalLM(SibAForCausalLM):  # inherits the setter, which feeds ExModel
    def __init__(self, config):
        super().__init__(config)
        self.model = ExModel(config)


EntryClass = ExForCausalLM
"""
        ),
    )

    def check(self, result) -> Iterator[Finding]:
        project = result.project
        # Holders some setter feeds: a class nothing can turn capture on for does not *drop* a capture.
        fed = setter_written_holders(result.graph)
        for qualname, cls in sorted(project.classes.items()):
            if "forward" not in cls.methods or project.sites.get(qualname) or qualname not in fed:
                continue
            base = next((q for q in project.mro(qualname)[1:] if any(s.function.endswith(".forward") for s in project.sites.get(q, []))), None)
            if base is None:
                continue
            loops = [l for ff in project.files for l in ff.layer_loops if l.class_qualname == qualname and l.function.endswith(".forward")]
            if not loops:
                continue  # a forward that delegates (super().forward) keeps the capture
            base_site = next(s for s in project.sites[base] if s.function.endswith(".forward"))
            yield self.finding(
                loops[0].location,
                f"{cls.name}.forward ({loops[0].location}) runs the layers without capturing, overriding {base.rsplit('.', 1)[-1]}.forward, "
                f"which captures ({base_site.location})",
                qualname,
                f"{qualname}.forward",
                steps=(("base class capture site", base_site.location), ("overriding loop without capture", loops[0].location)),
            )

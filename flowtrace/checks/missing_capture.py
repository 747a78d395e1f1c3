"""Registered targets that cannot capture although they should (FT001, FT002, FT003)."""

from __future__ import annotations

from typing import Iterator

from flowtrace.checks.base import Example, Finding, Rule
from flowtrace.analysis.resolve import NONE


class WrapperDropsSetter(Rule):
    code = "FT001"
    name = "wrapper-drops-setter"
    severity = "error"
    summary = "A registered wrapper builds a capture-capable model but does not forward the capture setter."
    rationale = (
        "Multimodal and wrapper classes hold the language model as an attribute. The engine calls the "
        "setter on the registered class; when the wrapper lacks it, EAGLE-3 cannot be enabled for this "
        "architecture even though the wrapped model supports it."
    )
    fix = "Add the setter to the wrapper and hand the ids to the wrapped model (self.language_model.<setter>(ids))."
    valid = (Example("class VL(Module):\n    def __init__(self, c):\n        self.language_model = LlamaForCausalLM(c)\n    def set_eagle3_layers_to_capture(self, ids=None):\n        self.language_model.set_eagle3_layers_to_capture(ids)"),)
    invalid = (Example("class VL(Module):\n    def __init__(self, c):\n        self.language_model = LlamaForCausalLM(c)\n    # no setter: the engine cannot turn capture on"),)

    def check(self, result) -> Iterator[Finding]:
        project = result.project
        for row in result.rows:
            if not row.generation_target or row.support != NONE:
                continue
            cls = project.classes[row.qualname]
            for a in cls.assignments:
                if a.attribute == "*":
                    continue
                inner = project.find_class(a.callee)
                if inner and inner != row.qualname and project.find_setter(inner) is not None:
                    setter = project.find_setter(inner)
                    entry = setter.method
                    if entry.startswith("_"):  # a holder's private setter: name the engine's entry point
                        entry = next((n for n in project.conv.setter_order if not n.startswith("_")), entry)
                    interfaces = sorted(project.conv.interfaces)
                    also = f" (declare {' or '.join(interfaces)})" if interfaces else ""
                    yield self.finding(
                        row.location,
                        f"{row.name} builds self.{a.attribute} = {inner.rsplit('.', 1)[-1]}, which supports capture "
                        f"({setter.method}), but {row.name} has no {entry}(){also}; EAGLE-3 cannot be enabled for "
                        f"{', '.join(row.architectures) or row.name}",
                        row.qualname,
                        f"{a.attribute}:{inner}",
                    )
                    break


class CaptureWithoutSetter(Rule):
    code = "FT002"
    name = "capture-without-setter"
    severity = "error"
    summary = "A model has a capture loop, but nothing can set the layers it captures."
    rationale = (
        "The forward records states for indices held in a capture attribute, yet no class on the path "
        "defines a setter for it: the attribute keeps its empty default and the draft receives nothing."
    )
    fix = "Define the engine's capture setter on the registered class (or inherit it) and write the capture attribute there."
    valid = (Example("class M(Module):\n    def set_eagle3_layers_to_capture(self, ids=None):\n        self.model.layers_to_capture = [i + 1 for i in ids]"),)
    invalid = (Example("class Model(Module):\n    def forward(self, h):\n        for i in range(self.start_layer, self.end_layer):\n            if i in self.layers_to_capture:\n                aux.append(h)\n# ...and no set_eagle3_layers_to_capture anywhere on the registered class"),)

    def check(self, result) -> Iterator[Finding]:
        project = result.project
        fed = {row.capture.holder for row in result.rows if row.capture is not None and row.capture.holder}
        reported = set()
        for row in result.rows:
            if not row.generation_target or row.capture is not None or row.source is not None:
                continue  # a config attribute, build context or hook sets the ids (config_capture)
            holders = [row.qualname] + [project.find_class(a.callee) for a in project.classes[row.qualname].assignments if a.attribute != "*"]
            for holder in holders:
                if not holder or holder in fed or holder in reported:
                    continue  # some registered class's setter feeds this loop: heads without a setter are fine
                site = project.site_for(holder, set(project.conv.attributes))
                if site is not None:
                    reported.add(holder)
                    yield self.finding(
                        site.location,
                        f"{site.class_qualname.rsplit('.', 1)[-1]} captures layers listed in {site.attribute or 'its capture attribute'}, "
                        f"but no capture setter anywhere sets them (registered users: {row.name})",
                        holder,
                        f"{site.function}:{site.attribute}",
                    )
                    break


class UnresolvedDelegate(Rule):
    code = "FT003"
    name = "unresolved-delegate"
    severity = "error"
    summary = "A setter hands the layer ids to an object whose class cannot capture."
    rationale = (
        "Delegation (self.language_model.<setter>(ids), a holder's private setter) only works when the "
        "delegate's class defines the setter and a capture loop. Otherwise the call fails at start-up or, "
        "behind a hasattr guard, silently captures nothing."
    )
    fix = "Make the delegate's class support capture, or point the setter at the attribute that does."
    valid = (Example("self.language_model = LlamaForCausalLM(c)  # defines the setter\nself.language_model.set_eagle3_layers_to_capture(ids)"),)
    invalid = (Example("self.language_model = VisionOnlyModel(c)  # no setter\nself.language_model.set_eagle3_layers_to_capture(ids)"),)

    def check(self, result) -> Iterator[Finding]:
        for row in result.rows:
            c = row.capture
            if c is None or not c.setter.delegate:
                continue
            problems = [p for p in c.problems if "which has no" in p]
            if problems and not c.inherited:
                yield self.finding(c.setter.location, f"{row.name}: {problems[0]}", row.qualname, f"{c.setter.delegate}.{c.setter.delegate_method}")

"""Registered targets that cannot capture although they should (FT001, FT002, FT003)."""

from __future__ import annotations

from typing import Iterator

from flowtrace.checks.base import Example, Finding, Rule
from flowtrace.analysis.graph import setter_written_holders
from flowtrace.checks.targets import capture_works, conventions, family_writers, is_target, methods_on_mro, short
from flowtrace.analysis.resolve import NONE
from flowtrace.model import facts as F
from flowtrace.model.facts import ProblemKind


class WrapperDropsSetter(Rule):
    code = "FT001"
    name = "wrapper-drops-setter"
    severity = "error"
    kind = ProblemKind.WRAPPER_WITHOUT_SETTER
    summary = "A registered wrapper builds a capture-capable model but lacks what the engine calls on an EAGLE-3 target."
    rationale = (
        "Multimodal and wrapper classes hold the language model as an attribute. The engine calls the "
        "setter (and, in some engines, more methods such as the embedding/head getter) on the registered "
        "class; when the wrapper lacks them, EAGLE-3 cannot be enabled for this architecture even though "
        "the wrapped model captures. Draft heads and non-autoregressive models named by the profile are "
        "not targets; a wrapped model whose own capture is broken is reported by the rule for that defect."
    )
    fix = "Add the missing methods to the wrapper and hand each call to the wrapped model (self.language_model.<method>(...))."
    valid = (
        Example(
            """\
from sglang.srt.models.sib_a import SibAForCausalLM, SibAModel

class ExVLForConditionalGeneration(Module):
    def __init__(self, config):
        self.language_model = SibAForCausalLM(config)

    def get_embed_and_head(self):
        return self.language_model.get_embed_and_head()

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.language_model.set_eagle3_layers_to_capture(layer_ids)


EntryClass = ExVLForConditionalGeneration
""", 'the wrapper hands both target methods to the language model'
        ),
        Example(
            """\
from sglang.srt.models.sib_a import SibAForCausalLM, SibAModel

class ExForCausalLMMTP(Module):
    def __init__(self, config):
        self.model = SibAForCausalLM(config)  # a draft head (profile draft_class_patterns)


EntryClass = ExForCausalLMMTP
""", 'draft heads are not EAGLE-3 targets'
        ),
    )
    invalid = (
        Example(
            """\
from sglang.srt.models.sib_a import SibAForCausalLM, SibAModel

class ExVLForConditionalGeneration(Module):
    def __init__(self, config):
        self.language_model = SibAForCausalLM(config)
    # no set_eagle3_layers_to_capture, no get_embed_and_head: the engine cannot serve a draft


EntryClass = ExVLForConditionalGeneration
"""
        ),
    )

    def check(self, result) -> Iterator[Finding]:
        project = result.project
        cc = conventions(result)
        for row in result.rows:
            if row.support != NONE or not is_target(row, project, cc):
                continue
            cls = project.classes[row.qualname]
            for a in cls.assignments:
                inner = project.find_class(a.callee) if a.attribute != "*" else None
                if not inner or inner == row.qualname or project.find_setter(inner) is None:
                    continue
                if not capture_works(project, inner):
                    continue  # the wrapped model cannot capture either: FT004/FT005/FT021 say why
                yield self._finding(result, row, a, inner)
                break

    def _finding(self, result, row, assignment, inner) -> Finding:
        project = result.project
        cc = conventions(result)
        inner_capture = project.resolve_capture(inner)
        setter = inner_capture.setter
        present = methods_on_mro(project, row.qualname)
        entry = next((n for n in project.conv.setter_order if not n.startswith("_")), setter.method)
        required = list(dict.fromkeys([entry, *cc.target_methods]))
        missing = [m for m in required if m not in present]
        interfaces = sorted(project.conv.interfaces)
        attr = f"self.{assignment.attribute}"
        where = F.Location(row.location.file, assignment.line)
        if interfaces:
            lacks = f"does not declare {' or '.join(interfaces)} (which supplies {entry}())"
            fix = f"Add {' or '.join(interfaces)} to {row.name}'s bases; its {entry}() reaches {attr}.model."
        else:
            lacks = f"has no {' and no '.join(m + '()' for m in missing)}, which the engine calls on an EAGLE-3 target"
            fix = f"Add {', '.join(m + '()' for m in missing)} to {row.name}, each handing the call to {attr}.<method>(...)."
        message = (
            f"{row.name} builds {attr} = {short(inner)} ({where}), which captures through {short(setter.class_qualname)}.{setter.method} "
            f"({setter.location}), but {lacks}; EAGLE-3 cannot be enabled for {', '.join(row.architectures) or row.name}"
        )
        flow = (("wrapper", row.location), ("wrapped model built", where), ("wrapped setter", setter.location), ("capture site", inner_capture.site.location if inner_capture.site else None))
        kind = ProblemKind.TARGET_METHODS_MISSING if missing and entry not in missing else self.kind
        return self.finding(row.location, message, row.qualname, f"{assignment.attribute}:{inner}", steps=flow, kind=kind, fix=fix)


def _holders(project, row) -> list[str]:
    holders = [row.qualname] + [project.find_class(a.callee) for a in project.classes[row.qualname].assignments if a.attribute != "*"]
    return [h for h in dict.fromkeys(holders) if h]


def _family_feed(result, row, site) -> list:
    """Another capture family's writes of the site's attribute from the row's classes."""
    writers = family_writers(result, conventions(result))
    classes = set(result.project.mro(row.qualname))
    return [u for q in classes for u in writers.get(q, []) if u.attribute == site.attribute]


def _unset_capture_sites(result, other_family: bool):
    """(row, holder, site, family writes) for target rows without a setter whose holder captures."""
    project = result.project
    cc = conventions(result)
    fed = setter_written_holders(result.graph)  # holders some setter chain writes (graph query)
    reported = set()
    for row in result.rows:
        if row.capture is not None or row.source is not None or not is_target(row, project, cc):
            continue  # row.source: a config attribute, build context or hook sets the ids (config_sources)
        for holder in _holders(project, row):
            if holder in fed or holder in reported:
                continue  # some registered class's setter feeds this loop: heads without a setter are fine
            site = project.site_for(holder, set(project.conv.attributes))
            if site is None:
                continue
            feed = _family_feed(result, row, site)
            if bool(feed) == other_family:
                reported.add(holder)
                yield row, holder, site, feed
            break


class CaptureWithoutSetter(Rule):
    code = "FT002"
    name = "capture-without-setter"
    severity = "error"
    kind = ProblemKind.CAPTURE_WITHOUT_SETTER
    summary = "A model has a capture loop, but no setter of any capture family can set the layers it captures."
    rationale = (
        "The forward records states for indices held in a capture attribute, yet no class on the path "
        "defines a setter for it (neither the EAGLE-3 setter nor another family's): the attribute keeps its "
        "empty default and the draft receives nothing."
    )
    fix = "Define the engine's capture setter on the registered class (or inherit it) and write the capture attribute there."
    valid = (
        Example(
            """\
class ExModel(Module):
    def __init__(self, config):
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.layers = ModuleList([])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states):
        aux_hidden_states = []
        for i in range(self.start_layer, self.end_layer):
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states)
            hidden_states = self.layers[i](hidden_states)
        return hidden_states, aux_hidden_states


class ExForCausalLM(Module):
    def __init__(self, config):
        self.model = ExModel(config)

    def set_eagle3_layers_to_capture(self, layer_ids=None):
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
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.layers = ModuleList([])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states):
        aux_hidden_states = []
        for i in range(self.start_layer, self.end_layer):
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states)
            hidden_states = self.layers[i](hidden_states)
        return hidden_states, aux_hidden_states


class ExForCausalLM(Module):
    def __init__(self, config):
        self.model = ExModel(config)  # no setter of any capture family


EntryClass = ExForCausalLM
"""
        ),
    )

    def check(self, result) -> Iterator[Finding]:
        setter = next(iter(result.project.conv.setter_order), "the capture setter")
        for row, holder, site, _ in _unset_capture_sites(result, other_family=False):
            yield self.finding(
                site.location,
                f"{short(site.class_qualname)} captures layers listed in {site.attribute or 'its capture attribute'} ({site.location}), "
                f"but no setter of any capture family writes it for {row.name}, which has no {setter}()",
                holder,
                f"{site.function}:{site.attribute}",
                steps=(("registered class", row.location), ("capture site", site.location)),
                fix=f"Add {setter}() to {row.name} and write {site.attribute} on the model that runs this loop.",
            )


class CaptureFedByOtherFamily(Rule):
    code = "FT018"
    name = "capture-fed-by-other-family"
    severity = "info"
    kind = ProblemKind.CAPTURE_FED_BY_OTHER_FAMILY
    summary = "A capture loop is set only by another capture family's setter (DFlash, DSpark), never by the EAGLE-3 setter."
    rationale = (
        "Engines share one capture attribute between speculative methods. When only another family's "
        "setter writes it, the model captures for that method, but EAGLE-3 cannot be enabled for it: the "
        "engine looks for the EAGLE-3 setter and refuses the draft."
    )
    fix = "Add the EAGLE-3 setter beside the other family's (mapping the draft's ids with the engine's convention)."
    valid = (
        Example(
            """\
class ExModel(Module):
    def __init__(self, config):
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.layers = ModuleList([])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states):
        aux_hidden_states = []
        for i in range(self.start_layer, self.end_layer):
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states)
            hidden_states = self.layers[i](hidden_states)
        return hidden_states, aux_hidden_states


class ExForCausalLM(Module):
    def __init__(self, config):
        self.model = ExModel(config)

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.model.layers_to_capture = [val + 1 for val in layer_ids]

    def set_dflash_layers_to_capture(self, layer_ids):
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
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.layers = ModuleList([])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states):
        aux_hidden_states = []
        for i in range(self.start_layer, self.end_layer):
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states)
            hidden_states = self.layers[i](hidden_states)
        return hidden_states, aux_hidden_states


class ExForCausalLM(Module):
    def __init__(self, config):
        self.model = ExModel(config)

    def set_dflash_layers_to_capture(self, layer_ids):  # DFlash only: no EAGLE-3 setter
        self.model.layers_to_capture = [val + 1 for val in layer_ids]


EntryClass = ExForCausalLM
"""
        ),
    )

    def check(self, result) -> Iterator[Finding]:
        cc = conventions(result)
        setter = next(iter(result.project.conv.setter_order), "the EAGLE-3 setter")
        for row, holder, site, feed in _unset_capture_sites(result, other_family=True):
            use = sorted(feed, key=lambda u: (u.location.file, u.location.line))[0]
            method = use.function.split(".")[-1]
            family = cc.family_of(method)
            yield self.finding(
                site.location,
                f"{short(site.class_qualname)}'s capture loop ({site.location}) is set only by {method} ({family.name if family else 'another family'}, "
                f"{use.location}); {row.name} has no {setter}(), so EAGLE-3 cannot be enabled for it",
                holder,
                f"{site.function}:{method}",
                steps=(("registered class", row.location), ("other family's setter", use.location), ("capture site", site.location)),
            )


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
    kind = ProblemKind.DELEGATE_LACKS_SETTER
    fix = "Make the delegate's class support capture, or point the setter at the attribute that does."
    valid = (
        Example(
            """\
from sglang.srt.models.sib_a import SibAForCausalLM, SibAModel

class ExVLForConditionalGeneration(Module):
    def __init__(self, config):
        self.language_model = SibAForCausalLM(config)  # defines the setter

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.language_model.set_eagle3_layers_to_capture(layer_ids)


EntryClass = ExVLForConditionalGeneration
"""
        ),
    )
    invalid = (
        Example(
            """\
class VisionOnlyModel(Module):
    def forward(self, input_ids, hidden_states):
        return hidden_states


class ExVLForConditionalGeneration(Module):
    def __init__(self, config):
        self.language_model = VisionOnlyModel(config)  # has no setter

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.language_model.set_eagle3_layers_to_capture(layer_ids)


EntryClass = ExVLForConditionalGeneration
"""
        ),
    )

    def check(self, result) -> Iterator[Finding]:
        project = result.project
        for row in result.rows:
            c, chain = row.capture, row.chain
            if c is None or chain is None or c.inherited or not chain.has(ProblemKind.DELEGATE_LACKS_SETTER):
                continue  # selected on the chain's typed problem, never its text
            method = c.setter.delegate_method
            target = c.delegates_to
            yield self.finding(
                c.setter.location,
                f"{row.name}.{c.setter.method} hands the ids to {c.setter.delegate}.{method}() ({c.setter.location}), "
                f"but {c.setter.delegate} is a {short(target)}, which has no {method}()",
                row.qualname,
                f"{c.setter.delegate}.{method}",
                steps=(("setter", c.setter.location), ("delegate class", project.classes[target].location if target in project.classes else None)),
            )

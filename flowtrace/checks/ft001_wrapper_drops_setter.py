"""FT001 wrapper-drops-setter: a registered wrapper builds a capture-capable model but lacks what the engine calls on an
EAGLE-3 target."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Iterator

from flowtrace.analysis.resolve import NONE
from flowtrace.model.consequence import Consequence
from flowtrace.checks.base import Example, Finding, FixExample, Rule
from flowtrace.checks.targets import (
    capture_works,
    conventions,
    is_target,
    method_title,
    methods_on_mro,
    short,
    wrapper_bases,
)
from flowtrace.model import facts as F
from flowtrace.model.facts import ProblemKind

if TYPE_CHECKING:
    from flowtrace.analysis.resolve import ModelRow
    from flowtrace.analysis.scan import ScanResult


class WrapperDropsSetter(Rule):
    code = "FT001"
    name = "wrapper-drops-setter"
    consequence = Consequence.REFUSED_STARTUP
    kind = ProblemKind.WRAPPER_WITHOUT_SETTER
    summary = (
        "A registered wrapper builds a capture-capable model but lacks what the engine calls on an EAGLE-3 target."
    )
    rationale = (
        "Multimodal and wrapper classes hold the language model as an attribute. The engine calls the "
        "setter (and, in some engines, more methods such as the embedding/head getter) on the registered "
        "class; when the wrapper lacks them, EAGLE-3 cannot be enabled for this architecture even though "
        "the wrapped model captures. Draft heads and non-autoregressive models named by the profile are "
        "not targets; a wrapped model whose own capture is broken is reported by the rule for that defect. "
        "When the wrapper is refused, nothing reaches that model and its rule's finding is dropped as "
        "unreachable, so a wrapped model whose forward never captures is said here (info): the refusal, "
        "and that adding the delegation alone would not help."
    )
    fix = (
        "Add the missing methods to the wrapper and hand each call to the wrapped model"
        " (self.language_model.<method>(...))."
    )
    autofix = "flowtrace.fix.codemods.wrapper_methods:plan"
    fix_examples = (
        FixExample(
            """\
from sglang.srt.models.sib_a import SibAForCausalLM


class ExVLForConditionalGeneration(Module):
    def __init__(self, config):
        self.vision_tower = None  # images are merged into the embeddings first
        self.language_model = SibAForCausalLM(config)

    def forward(self, input_ids, hidden_states):
        return self.language_model(input_ids, hidden_states)


EntryClass = ExVLForConditionalGeneration
""",
            """\
from sglang.srt.models.sib_a import SibAForCausalLM


class ExVLForConditionalGeneration(Module):
    def __init__(self, config):
        self.vision_tower = None  # images are merged into the embeddings first
        self.language_model = SibAForCausalLM(config)

    def forward(self, input_ids, hidden_states):
        return self.language_model(input_ids, hidden_states)

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.language_model.set_eagle3_layers_to_capture(layer_ids)

    def get_embed_and_head(self):
        return self.language_model.get_embed_and_head()


EntryClass = ExVLForConditionalGeneration
""",
            "both target methods added, each handing the call to self.language_model",
        ),
    )
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
""",
            line=3,
            kind=ProblemKind.WRAPPER_WITHOUT_SETTER,
            message="builds self.language_model = SibAForCausalLM",
            consequence=Consequence.REFUSED_STARTUP,
            severity="info",
        ),
        Example(
            """\
from sglang.srt.models.sib_a import SibAForCausalLM
from sglang.srt.models.sib_b import SibBForCausalLM

class ExBaseForCausalLM(Module):
    def forward(self, input_ids, hidden_states):
        return self.language_model(input_ids, hidden_states)

    def get_embed_and_head(self):
        return self.language_model.get_embed_and_head()
    # no set_eagle3_layers_to_capture: neither subclass can serve a draft; one method here fixes both


class ExAForCausalLM(ExBaseForCausalLM):
    def __init__(self, config):
        self.language_model = SibAForCausalLM(config)


class ExBForCausalLM(ExBaseForCausalLM):
    def __init__(self, config):
        self.language_model = SibBForCausalLM(config)


EntryClass = [ExAForCausalLM, ExBForCausalLM]
""",
            note="one finding at the base both wrappers share, not one per wrapper",
            line=4,
            kind=ProblemKind.WRAPPER_WITHOUT_SETTER,
            message="ExBaseForCausalLM is the base of 2 registered wrappers",
            consequence=Consequence.REFUSED_STARTUP,
            severity="info",
        ),
        Example(
            """\
class ExTextModel(Module):
    def __init__(self, config):
        self.layers = ModuleList([])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states):
        return hidden_states  # never reads layers_to_capture


class ExTextLM(Module):
    def __init__(self, config):
        self.model = ExTextModel(config)

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.model.layers_to_capture = [val + 1 for val in layer_ids]


class ExVLForConditionalGeneration(Module):
    def __init__(self, config):
        self.language_model = ExTextLM(config)


EntryClass = ExVLForConditionalGeneration
""",
            note=(
                "refused, and the delegation alone would not help: the wrapped model's forward never captures (its rows"
                " carry this finding)"
            ),
            line=18,
            kind=ProblemKind.WRAPPER_WITHOUT_SETTER,
            message="ExTextModel.forward (sglang/srt/models/example.py:8) never captures",
            consequence=Consequence.REFUSED_STARTUP,
            severity="info",
        ),
    )

    def check(self, result: ScanResult) -> Iterator[Finding]:
        project = result.project
        cc = conventions(result)
        found: list[tuple[Finding, str]] = []
        for row in result.rows:
            if row.support != NONE or not is_target(row, project, cc):
                continue
            cls = project.lookup.classes[row.qualname]
            broken: Finding | None = None
            for a in cls.assignments:
                inner = project.lookup.find_class(a.callee) if a.attribute != "*" else None
                if not inner or inner == row.qualname or project.lookup.find_setter(inner) is None:
                    continue
                if not capture_works(project, inner):
                    # the wrapped model cannot capture either: FT004/FT005/FT021 say why, but a
                    # refused wrapper hides those (nothing reaches the inner model), so the one
                    # case they cannot reach is said here, without telling to add the setter alone
                    broken = broken or self._wrapped_never_captures(result, row, a, inner)
                    continue
                found.append((self._finding(result, row, a, inner), a.attribute))
                break
            else:
                if broken is not None:
                    yield broken
        yield from self._at_shared_bases(result, found)

    def _at_shared_bases(self, result: ScanResult, found: list[tuple[Finding, str]]) -> Iterator[Finding]:
        """One finding per base class that lacks the delegation for all its wrappers (the place
        to fix: one method there serves every subclass), the wrappers as related locations;
        the per-class findings are kept as its causes (their fingerprints, their codemods)."""
        lookup = result.project.lookup
        cc = conventions(result)
        bases = {f.fingerprint: wrapper_bases(lookup, f.symbol or "", cc.speculative_entry_points) for f, _ in found}
        by_base: dict[tuple[str, str], list[Finding]] = {}
        for f, attribute in found:
            shared = [
                b
                for b in bases[f.fingerprint]
                if any(b in bases[g.fingerprint] and a == attribute for g, a in found if g is not f)
            ]
            by_base.setdefault((shared[0] if shared else "", attribute), []).append(f)
        for (base, attribute), group in sorted(by_base.items()):
            if not base or len(group) < 2:
                yield from group
                continue
            yield self._base_finding(result, base, attribute, group)

    def _base_finding(self, result: ScanResult, base: str, attribute: str, group: list[Finding]) -> Finding:
        fact = result.project.lookup.classes[base]
        names = [short(f.symbol) for f in group]
        archs = [
            a for f in group for r in result.rows if r.qualname == f.symbol for a in (r.architectures or (r.name,))
        ]
        title = method_title(result)
        lacks = (
            group[0].message.split(", but ", 1)[1].split(f"; {title} cannot", 1)[0]
            if ", but " in group[0].message
            else f"lacks the {title} methods"
        )
        lacks = lacks.replace(names[0], fact.name)
        message = (
            f"{fact.name} is the base of {len(group)} registered wrappers that each build self.{attribute} with a model"
            f" that captures ({', '.join(names)}), but {lacks}; {title} cannot be enabled for"
            f" {', '.join(dict.fromkeys(archs))}"
        )
        fix = (group[0].hint or self.fix).replace(
            names[0], fact.name
        ) + f" One method on {fact.name} serves all {len(group)} subclasses."
        head = self.finding(
            fact.location,
            message,
            base,
            f"{attribute}:base",
            kind=group[0].kind,
            fix=fix,
            steps=(
                ("base class", fact.location),
                *((f"wrapper {short(f.symbol)}", F.Location(f.file, f.line)) for f in group),
            ),
            consequence=Consequence.REFUSED_STARTUP,
            effect=group[0].effect or _refusal_words(result, names),
            affects=(f.symbol for f in group if f.symbol),
        )
        return dataclasses.replace(
            head, related=tuple(F.Location(f.file, f.line) for f in group), causes=tuple(group), grouped=True,
        )

    def _wrapped_never_captures(
        self, result: ScanResult, row: ModelRow, assignment: F.AttributeAssignment, inner: str
    ) -> Finding | None:
        """A refused wrapper around a model whose forward never captures: the wrapper's refusal
        (info) that also says the delegation alone would not help, naming that forward. The
        wrapped classes are related places, so the report shows it on their (broken) rows."""
        project = result.project
        capture = project.captures.resolve_capture(inner)
        if capture is None or capture.holder is None or ProblemKind.NO_CAPTURE_SITE not in capture.kinds():
            return None  # another defect of the wrapped model: its own rule says it
        holder = capture.holder
        classes = project.lookup.classes
        owner = next((c for c in project.lookup.mro(holder) if c in classes and "forward" in classes[c].methods), None)
        forward = project.lookup.classes[owner].method_location("forward") if owner else None
        if owner is None or forward is None:
            return None
        lacks, fix, missing, entry = self._lacks(result, row, assignment, capture.setter.method)
        attr = f"self.{assignment.attribute}"
        where = F.Location(row.location.file, assignment.line)
        reach = short(holder) + (f" (through {short(inner)})" if holder != inner else "")
        runs = (
            f"{short(owner)}.forward ({forward})"
            if owner == holder
            else f"its forward, {short(owner)}.forward ({forward}),"
        )
        message = (
            f"{row.name} builds {attr} = {short(inner)} ({where}), but {lacks}; {method_title(result)} cannot be"
            f" enabled for {', '.join(row.architectures) or row.name}. Adding that alone would not help: the ids would"
            f" reach {reach}, and {runs} never captures a layer"
        )
        fix = f"First make {short(owner)}.forward ({forward}) record the layers the ids name; then: {fix}"
        kind = ProblemKind.TARGET_METHODS_MISSING if missing and entry not in missing else self.kind
        inner_places = tuple(
            dict.fromkeys(project.lookup.classes[c].location for c in (inner, holder) if c in project.lookup.classes)
        )
        head = self.finding(
            row.location,
            message,
            row.qualname,
            f"{assignment.attribute}:{inner}:never-captures",
            kind=kind,
            fix=fix,
            steps=(
                ("wrapper", row.location),
                ("wrapped model built", where),
                *(("wrapped model", p) for p in inner_places),
                ("forward that never captures", forward),
            ),
            consequence=Consequence.REFUSED_STARTUP,
            effect=self._missing_effect(row, kind, missing),
        )
        return dataclasses.replace(head, related=inner_places)

    def _lacks(
        self, result: ScanResult, row: ModelRow, assignment: F.AttributeAssignment, method: str
    ) -> tuple[str, str, list[str], str]:
        """What the wrapper lacks (words, fix, the missing target methods, the entry setter)."""
        project = result.project
        cc = conventions(result)
        present = methods_on_mro(project.lookup, row.qualname)
        entry = next((n for n in project.conv.setter_order if not n.startswith("_")), method)
        required = list(dict.fromkeys([entry, *cc.target_methods]))
        missing = [m for m in required if m not in present]
        interfaces = sorted(project.conv.interfaces)
        attr = f"self.{assignment.attribute}"
        if interfaces:
            lacks = f"does not declare {' or '.join(interfaces)} (which supplies {entry}())"
            fix = f"Add {' or '.join(interfaces)} to {row.name}'s bases; its {entry}() reaches {attr}.model."
        else:
            lacks = (
                f"has no {' and no '.join(m + '()' for m in missing)}, which the engine calls on an"
                f" {method_title(result)} target"
            )
            fix = (
                f"Add {', '.join(m + '()' for m in missing)} to {row.name}, each handing the call to"
                f" {attr}.<method>(...)."
            )
        return lacks, fix, missing, entry

    @staticmethod
    def _missing_effect(row: ModelRow, kind: ProblemKind, missing: list[str]) -> str | None:
        """The setter itself missing: None (the engine's own refusal, profile, quoted by the
        grading); another target method missing: the AttributeError the engine raises."""
        if kind is not ProblemKind.TARGET_METHODS_MISSING:
            return None
        return (
            f"the engine fails at start-up: AttributeError: '{row.name}' object has no attribute '{missing[0]}' "
            f"when it prepares the draft: unsupported, not served wrong"
        )

    def _finding(self, result: ScanResult, row: ModelRow, assignment: F.AttributeAssignment, inner: str) -> Finding:
        project = result.project
        inner_capture = project.captures.resolve_capture(inner)
        assert inner_capture is not None, "asked only for a wrapped model that captures (capture_works)"
        setter = inner_capture.setter
        lacks, fix, missing, entry = self._lacks(result, row, assignment, setter.method)
        attr = f"self.{assignment.attribute}"
        where = F.Location(row.location.file, assignment.line)
        message = (
            f"{row.name} builds {attr} = {short(inner)} ({where}), which captures through"
            f" {short(setter.class_qualname)}.{setter.method} ({setter.location}), but {lacks};"
            f" {method_title(result)} cannot be enabled for {', '.join(row.architectures) or row.name}"
        )
        flow = (
            ("wrapper", row.location),
            ("wrapped model built", where),
            ("wrapped setter", setter.location),
            ("capture site", inner_capture.site.location if inner_capture.site else None),
        )
        kind = ProblemKind.TARGET_METHODS_MISSING if missing and entry not in missing else self.kind
        return self.finding(
            row.location, message, row.qualname, f"{assignment.attribute}:{inner}", steps=flow, kind=kind, fix=fix,
            consequence=Consequence.REFUSED_STARTUP, effect=self._missing_effect(row, kind, missing),
        )


def _refusal_words(result: ScanResult, names: list[str]) -> str | None:
    """The engine's start-up refusal (profile ``startup_refusal``) as it reads for the first
    wrapper, the others named: the engine names the class it was asked to serve, not the base."""
    said = conventions(result).startup_refusal
    if not said:
        return None
    words = "the engine refuses each of them at start-up: " + said.replace("<class>", names[0])
    return words + (f" (likewise for {', '.join(names[1:])})" if len(names) > 1 else "")

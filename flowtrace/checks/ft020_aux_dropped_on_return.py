"""FT020 aux-dropped-on-return: a forward captures aux states and then returns early, without them, on a path that
serves drafts; or the wrapper the runner calls keeps only the first element of its model's output."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from flowtrace.checks.example_code import PLAIN_CAPTURING_MODEL, module
from flowtrace.checks.example_code import causal_lm
from flowtrace.checks.base import Example, Finding, Graded, Rule
from flowtrace.model.consequence import Consequence
from flowtrace.index.stream_facts import EARLY_RETURN
from flowtrace.model import facts as F
from flowtrace.index.returns import DROP, UNPACK
from flowtrace.model.facts import ProblemKind, ReturnKind

if TYPE_CHECKING:
    from flowtrace.analysis.resolve import Project
    from flowtrace.analysis.scan import ScanResult


class AuxDroppedOnReturn(Rule):
    code = "FT020"
    name = "aux-dropped-on-return"
    consequence = Consequence.SILENT_WRONG
    kind = ProblemKind.RETURN_DROPPED
    other_consequences = (Consequence.CRASH_SERVING,)
    summary = (
        "A forward captures aux states and then returns early, without them, on a path that serves drafts; "
        "or the wrapper the runner calls keeps only the first element of its model's output."
    )
    rationale = (
        "The capture loop fills the aux container, but a return placed before the one that hands the "
        "container back (under a test that is neither a pipeline-rank guard nor an emptiness test of the "
        "container) ends the forward without it: on that path the draft receives nothing although the "
        "layers were captured. A wrapper whose forward returns `out[0]` of its model's (hidden, aux) "
        "output drops them the same way, on every path (return path: not_unpacked)."
    )
    fix = "Return the aux states on that path too (or move the early return after the capture's return)."
    valid = (
        Example(
            """\
class ExModel(Module):
    def __init__(self, config):
        self.is_last_rank = True
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.layers = ModuleList([])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states, batch):
        aux_hidden_states = []
        for i in range(self.start_layer, self.end_layer):
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states)
            hidden_states = self.layers[i](hidden_states)
        if not self.is_last_rank:
            return hidden_states  # a pipeline guard
        if len(aux_hidden_states) == 0:
            return hidden_states
        return hidden_states, aux_hidden_states
"""
        ),
    )
    invalid = (
        Example(
            """\
class ExModel(Module):
    def __init__(self, config):
        self.is_last_rank = True
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.layers = ModuleList([])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states, batch):
        aux_hidden_states = []
        for i in range(self.start_layer, self.end_layer):
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states)
            hidden_states = self.layers[i](hidden_states)
        if not self.is_last_rank:
            return hidden_states  # a pipeline guard
        if not batch.forward_mode.is_idle():
            return hidden_states  # aux dropped on every busy batch
        if len(aux_hidden_states) == 0:
            return hidden_states
        return hidden_states, aux_hidden_states
"""
            + "\n\n"
            + causal_lm(),
            "one value returned where the wrapper unpacks (hidden, aux): a ValueError on that path",
            line=17,
            kind=ProblemKind.RETURN_DROPPED,
            message="but returns without them at",
            consequence=Consequence.CRASH_SERVING,
            severity="error",
        ),
        Example(
            """\
class ExModel(Module):
    def __init__(self, config):
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.layers = ModuleList([])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states, batch):
        aux_hidden_states = []
        for i in range(self.start_layer, self.end_layer):
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states)
            hidden_states = self.layers[i](hidden_states)
        if not batch.forward_mode.is_idle():
            return hidden_states, batch  # a tuple, but not (hidden, aux)
        if len(aux_hidden_states) == 0:
            return hidden_states
        return hidden_states, aux_hidden_states


class ExTextModel(ExModel):
    def forward(self, input_ids, hidden_states, batch):
        out = super().forward(input_ids, hidden_states, batch)
        if isinstance(out, tuple):
            hidden_states, self.last_extra = out
            return hidden_states  # one element reaches the callers
        return out


def embed_routine(input_ids, hidden_states, batch, language_model, use_extra):
    return language_model(input_ids, hidden_states, batch)


class ExForCausalLM(Module):
    def __init__(self, config):
        self.config = config
        self.model = ExTextModel(config)
        self.use_extra = False
        self.capture_aux_hidden_states = False

    def forward(self, input_ids, hidden_states, batch):
        hidden_states = embed_routine(input_ids, hidden_states, batch, language_model=self.model, use_extra=self.use_extra)
        if self.capture_aux_hidden_states:
            hidden_states, aux = hidden_states
            return hidden_states, aux
        return hidden_states

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.capture_aux_hidden_states = True
        self.model.layers_to_capture = [val + 1 for val in layer_ids]


EntryClass = ExForCausalLM
""",  # noqa: E501 (the example renders verbatim in docs/rules.md)
            "a tuple returned early, cut to one element by a subclass's super().forward() and unpacked as (hidden, aux)"
            " by the wrapper through a helper it hands the model to: a ValueError on that path",
            line=14,
            kind=ProblemKind.RETURN_DROPPED,
            message="but returns without them at",
            consequence=Consequence.CRASH_SERVING,
            severity="error",
        ),
        Example(
            module(
                PLAIN_CAPTURING_MODEL,
                """\
class ExForCausalLM(Module):
    def __init__(self, config):
        self.config = config
        self.model = ExModel(config)

    def forward(self, input_ids, hidden_states, positions=None):
        out = self.model(input_ids, hidden_states)
        return out[0]  # the aux states never reach the runner

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.model.layers_to_capture = [val + 1 for val in layer_ids]
""",
                """\
EntryClass = ExForCausalLM
""",
            ),
            "the wrapper keeps only the first element of the model's output",
            line=23,
            kind=ProblemKind.RETURN_DROPPED,
            message="keeps only the first element",
            consequence=Consequence.SILENT_WRONG,
            severity="error",
        ),
    )

    def check(self, result: ScanResult) -> Iterator[Finding]:
        yield from self._not_unpacked(result)
        sites = result.project.lookup.sites
        for ff in result.files:
            for fact in ff.stream_facts:
                if fact.kind != EARLY_RETURN:
                    continue
                site = next((s for s in sites.get(fact.class_qualname, []) if s.function == fact.function), None)
                through = _kept_one(result, fact) if fact.values != 1 else None
                seen_as = through.class_qualname if through is not None else fact.class_qualname
                unpacking = _unpacking_callers(result, seen_as) if fact.values == 1 or through is not None else []
                yield self.finding(
                    fact.location,
                    f"{fact.function} captures aux states{f' ({site.location})' if site else ''} but returns without"
                    f" them at {fact.location} when `{fact.detail}`, before the return that hands them back",
                    fact.class_qualname,
                    f"{fact.function}:{fact.detail}",
                    steps=(
                        ("capture site", site.location if site else None),
                        ("return without the aux states", fact.location),
                        *(("subclass that returns one element of it", u.location) for u in (through,) if u is not None),
                        *(("caller that unpacks (hidden, aux)", u.location) for u in unpacking[:1]),
                    ),
                    **_consequence(fact, unpacking, through),
                )

    def _not_unpacked(self, result: ScanResult) -> Iterator[Finding]:
        """Rows whose return path (link 6) keeps only the first element of the inner output."""
        seen: set[F.Location] = set()
        for row in result.rows:
            link = row.capture.returns if row.capture is not None and row.registered else None
            if link is None or link.kind != ReturnKind.NOT_UNPACKED or link.location is None or link.location in seen:
                continue
            seen.add(link.location)
            site = row.capture.site if row.capture is not None else None
            yield self.finding(
                link.location,
                f"{row.name}: {link.reason}",
                row.qualname,
                f"not_unpacked:{link.location.line}",
                steps=(
                    ("capture site", site.location if site else None),
                    ("return without the aux states", link.location),
                ),
                consequence=Consequence.SILENT_WRONG,
                effect=(
                    "the captured layers never reach the runner: the draft receives the first output alone in their"
                    " place"
                ),
            )


def _forwards_run(project: Project, qualname: str) -> list[str]:
    """The classes whose ``forward`` runs when an instance of ``qualname`` is called: the first
    in its MRO that defines one, then each base reached by ``super().forward(...)``."""
    out: list[str] = []
    for q in project.lookup.mro(qualname):
        fact = project.lookup.classes.get(q)
        if fact is None or "forward" not in getattr(fact, "methods", ()):
            continue
        out.append(q)
        if "forward" not in getattr(fact, "extends", ()):
            break
    return out


def _kept_one(result: ScanResult, fact: F.StreamFact) -> F.OutputUseFact | None:
    """A subclass forward that runs the one holding ``fact`` through ``super().forward(...)``
    and returns one element of what it returned (``h, x = out; return h``): callers of that
    subclass see one value where this return hands back a tuple."""
    project = result.project
    method = fact.function.rsplit(".", 1)[-1]
    for qualname in project.lookup.classes:
        if qualname == fact.class_qualname or fact.class_qualname not in project.lookup.mro(qualname):
            continue
        uses: list[F.OutputUseFact] = project.lookup.output_uses.get(qualname, [])
        for use in uses:
            if use.via == "super()" and use.kind == DROP and use.attribute == method:
                return use
    return None


def _unpacking_callers(result: ScanResult, holder: str) -> list[F.OutputUseFact]:
    """The calls that unpack ``(hidden, aux)`` from the output of ``holder``'s forward: a
    forward a model class runs (its own, or a base's it reaches through ``super().forward``)
    unpacking what an attribute built as that class (or a subclass) returns, called directly
    or through a helper handed the module, for the instance's own construction."""
    project = result.project
    out: dict[F.Location, F.OutputUseFact] = {}
    for qualname in project.lookup.classes:
        for owner in _forwards_run(project, qualname):
            for use in project.lookup.output_uses.get(owner, []):
                if use.kind != UNPACK or not use.attribute or use.via == "super()":
                    continue
                inner = project.holders.attribute_class(qualname, use.attribute)
                if inner is not None and holder in project.lookup.mro(inner):
                    out.setdefault(use.location, use)
    return sorted(out.values(), key=lambda u: (u.location.file, u.location.line))


def _consequence(
    fact: F.StreamFact, unpacking: list[F.OutputUseFact], through: F.OutputUseFact | None = None
) -> Graded:
    """A return of one value where a caller unpacks (hidden, aux) is a loud crash on that path
    (a ValueError at the unpacking), not a silent loss; so is a tuple that a subclass's forward
    cuts to one element before such a caller sees it. A tuple in their place reaching the caller
    whole is unpacked without complaint, and the draft receives its second element as if it
    were the states."""
    if unpacking:
        use = unpacking[0]
        one = (f"{through.function} returns one element of what this return hands back ({through.location})"
               if through is not None else "this return hands back one value")
        return {
            "consequence": Consequence.CRASH_SERVING,
            "effect": (
                f"on a batch where `{fact.detail}` {one} and {use.function} unpacks `{use.text}` ({use.location}) from"
                " it: a ValueError on that path (at start-up instead, if the engine's start-up forward takes it)"
            ),
        }
    return {
        "consequence": Consequence.SILENT_WRONG,
        "effect": (
            f"on every batch where `{fact.detail}` the captured layers never reach the draft: it receives "
            f"what this return hands back in their place, and nothing fails here"
        ),
    }

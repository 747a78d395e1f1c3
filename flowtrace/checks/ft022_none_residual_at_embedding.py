"""FT022 none-residual-at-embedding: the capture before layer i adds the residual, which is still None at the first layer: asking for the embedding raises."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from flowtrace.checks.example_code import causal_lm
from flowtrace.checks.base import Example, Finding, FixExample, Rule
from flowtrace.model.consequence import Consequence
from flowtrace.checks.targets import conventions, short
from flowtrace.model import facts as F
from flowtrace.model.facts import ProblemKind

if TYPE_CHECKING:
    from flowtrace.analysis.scan import ScanResult


def _first_index_is_embedding(site) -> bool:
    """The first iteration records b = 0: the capture runs before the layer call (input point)."""
    return site.point == F.INPUT


def _users(result) -> dict[str, str]:
    """Holder -> a registered model that captures through it, for the message."""
    out: dict[str, list[str]] = {}
    for row in result.rows:
        site = row.chain.site if row.chain is not None and row.capture is not None else None
        if row.registered and site is not None and site.owner:
            out.setdefault(site.owner, []).append(row.name)
    return {k: ", ".join(sorted(v)[:3]) + (f" and {len(v) - 3} more" if len(v) > 3 else "") for k, v in out.items()}


_UNGUARDED = """\
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
                aux_hidden_states.append(hidden_states + residual)
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
"""A registered model whose loop adds the None residual before layer 0 (fix examples)."""


class NoneResidualAtEmbedding(Rule):
    code = "FT022"
    name = "none-residual-at-embedding"
    severity = "error"
    kind = ProblemKind.INDEX0_RAISES
    summary = "The capture before layer i adds the residual, which is still None at the first layer: asking for the embedding raises."
    rationale = (
        "Split-residual loops start with `residual = None` and let the first layer create it. A capture "
        "that records `hidden_states + residual` before the layer runs evaluates `tensor + None` at the "
        "first index, so a draft that asks for the embedding (the engine's embedding id) crashes the "
        "engine with a TypeError instead of capturing. Sites that guard the sum (`h if r is None else h + r`) "
        "are fine."
    )
    fix = "Record `hidden_states if residual is None else hidden_states + residual` (as the engine's guarded helper does)."
    autofix = "flowtrace.fix.codemods.guard_residual:plan"
    fix_examples = (
        FixExample(
            _UNGUARDED,
            _UNGUARDED.replace(
                "aux_hidden_states.append(hidden_states + residual)",
                "aux_hidden_states.append(hidden_states if residual is None else hidden_states + residual)",
            ),
            "the append's argument is guarded in place",
        ),
        FixExample(
            _UNGUARDED.replace(
                "                aux_hidden_states.append(hidden_states + residual)\n",
                "                # the stream entering layer i\n"
                "                aux = (hidden_states + residual).contiguous()\n"
                "                aux_hidden_states.append(aux)\n",
            ),
            _UNGUARDED.replace(
                "                aux_hidden_states.append(hidden_states + residual)\n",
                "                # the stream entering layer i\n"
                "                aux = (hidden_states if residual is None else hidden_states + residual).contiguous()\n"
                "                aux_hidden_states.append(aux)\n",
            ),
            "a local computed from the sum: the parentheses stay, the comment too",
        ),
    )
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
        return hidden_states, aux_hidden_states
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
        residual = None
        aux_hidden_states = []
        for i in range(self.start_layer, self.end_layer):
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states + residual)
            hidden_states, residual = self.layers[i](hidden_states, residual)
        return hidden_states, aux_hidden_states
""" + "\n\n" + causal_lm(), 'residual is None at the first layer', line=12, kind=ProblemKind.INDEX0_RAISES, message='records `hidden_states + residual`', consequence=Consequence.CRASH_SERVING, severity="error"
        ),
    )

    def check(self, result: ScanResult) -> Iterator[Finding]:
        """Reads the capture sites' first-iteration stream facts (flowtrace.index.streams):
        an operand that is None when the loop starts, added unguarded at the index the first
        iteration meets (``label_offset``)."""
        embedding = conventions(result).embedding_id
        users = _users(result)
        for ff in result.files:
            for site in ff.capture_sites:
                if not site.first_none or site.label_offset is None or not _first_index_is_embedding(site):
                    continue
                name = site.first_none
                none_at = site.first_none_at or site.location
                at = site.stored_at or site.location
                ids = f"id {embedding}" if embedding is not None else "the embedding's id"
                who = users.get(site.class_qualname)
                yield self.finding(
                    site.location,
                    f"{site.function} records `{site.captured_expression or name}` ({at}) before the first layer while {name} is None "
                    f"({none_at}): a draft asking for the embedding ({ids}) makes {who or short(site.class_qualname)} raise a TypeError",
                    site.class_qualname,
                    f"{site.function}:{name}",
                    steps=(("bound to None", none_at), ("sum with the None operand", at), ("capture site", site.location)),
                    consequence=Consequence.CRASH_SERVING,
                    effect=(
                        f"raises TypeError (tensor + None) in the first forward run with the draft's layers when it asks "
                        f"for b=0 ({ids}): at start-up where the engine profiles with a dummy forward, else on the first "
                        f"request; every other boundary is served"
                    ),
                )

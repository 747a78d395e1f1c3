"""FT022 none-residual-at-embedding: the capture before layer i adds the residual, which is still None at the first
layer: asking for the embedding raises."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Iterator

from flowtrace.checks.example_code import causal_lm
from flowtrace.checks.base import Example, Finding, FixExample, Graded, Rule
from flowtrace.model.consequence import Consequence
from flowtrace.checks.targets import first_forward_failure, conventions, is_target, short
from flowtrace.model import facts as F
from flowtrace.model.facts import ProblemKind

if TYPE_CHECKING:
    from flowtrace.analysis.resolve import ModelRow
    from flowtrace.model.facts import CaptureSiteFact
    from flowtrace.analysis.scan import ScanResult


def _first_index_is_embedding(site: CaptureSiteFact) -> bool:
    """The first iteration records b = 0: the capture runs before the layer call (input point)."""
    return site.point == F.INPUT


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
    consequence = Consequence.CRASH_SERVING
    kind = ProblemKind.INDEX0_RAISES
    other_consequences = (Consequence.CRASH_STARTUP,)
    summary = (
        "The capture before layer i adds the residual, which is still None at the first layer: asking for the embedding"
        " raises."
    )
    rationale = (
        "Split-residual loops start with `residual = None` and let the first layer create it. A capture "
        "that records `hidden_states + residual` before the layer runs evaluates `tensor + None` at the "
        "first index, so a draft that asks for the embedding (the engine's embedding id) crashes the "
        "engine with a TypeError instead of capturing. Sites that guard the sum (`h if r is None else h + r`) "
        "are fine."
    )
    fix = (
        "Record `hidden_states if residual is None else hidden_states + residual` (as the engine's guarded helper"
        " does)."
    )
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
"""
            + "\n\n"
            + causal_lm(),
            "residual is None at the first layer",
            line=12,
            kind=ProblemKind.INDEX0_RAISES,
            message="records `hidden_states + residual`",
            consequence=Consequence.CRASH_STARTUP,
            severity="warning",
        ),
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
"""
            + "\n\n"
            + causal_lm(
                "    def set_eagle3_layers_to_capture(self, layer_ids=None):\n"
                "        self.capture_aux_hidden_states = True\n"
                "        if layer_ids and layer_ids[0] == 1:\n"
                "            self.model.layers_to_capture = [val + 1 for val in layer_ids]\n"
                "        else:\n"
                "            self.model.layers_to_capture = list(layer_ids)\n"
            ),
            note=(
                "the setter keeps id -1 as -1 (never index 0) but sends id 0 (b=1 in this engine's convention) to index"
                " 0: the finding names the id that crashes, not the embedding's"
            ),
            line=12,
            kind=ProblemKind.INDEX0_RAISES,
            message="a draft asking for id 0 (b=1 in this engine's convention",
            consequence=Consequence.CRASH_STARTUP,
            severity="warning",
        ),
    )

    def check(self, result: ScanResult) -> Iterator[Finding]:
        """Reads the capture sites' first-iteration stream facts (flowtrace.index.streams):
        an operand that is None when the loop starts, added unguarded at the index the first
        iteration meets (``label_offset``). Which draft id reaches that index is traced through
        each served class's own setter (:func:`crashing_ids`): the embedding's id in most
        classes, another id where the setter maps ids differently, none where no id can."""
        embedding = conventions(result).embedding_id
        users = _user_rows(result)
        for sites in _one_per_loop(result):
            site = sites[0]
            rows = users.get(site.class_qualname, [])
            crash = crashing_ids(result, rows, site.location.file, embedding)
            if crash is not None and not crash:
                continue  # every served class traced: no id a draft can send reaches index 0
            found = self._finding(result, site, crash, rows, embedding)
            yield dataclasses.replace(found, related=tuple(s.location for s in sites[1:]))

    def _finding(
        self,
        result: ScanResult,
        site: CaptureSiteFact,
        crash: dict[int, list[str]] | None,
        rows: list[ModelRow],
        embedding: int | None,
    ) -> Finding:
        name = site.first_none
        none_at = site.first_none_at or site.location
        at = site.stored_at or site.location
        who = _listed([r.name for r in rows]) or short(site.class_qualname)
        if not crash:  # not traced (no served class resolves): the convention's embedding id
            asks = f"the embedding ({f'id {embedding}' if embedding is not None else 'the embedding id'})"
            ids = f"b=0 ({f'id {embedding}' if embedding is not None else 'the embedding id'})"
        else:
            asks = " or ".join(_id_words(i, embedding, names, len(rows)) for i, names in sorted(crash.items()))
            named = ", ".join(f"id {i}" for i in sorted(crash))
            ids = f"b=0 ({named})" if set(crash) == {embedding} else f"index 0 ({named})"
            who = _listed(sorted({n for names in crash.values() for n in names}))
        return self.finding(
            site.location,
            f"{site.function} records `{site.captured_expression or name}` ({at}) before the first layer while"
            f" {name} is None ({none_at}): a draft asking for {asks} makes {who} raise a TypeError",
            site.class_qualname,
            f"{site.function}:{name}",
            steps=(("bound to None", none_at), ("sum with the None operand", at), ("capture site", site.location)),
            **_when(result, ids),
        )


def _when(result: ScanResult, ids: str) -> Graded:
    """A TypeError in the first forward with the draft's layers: at start-up where the engine's
    start-up forward runs with the aux capture on (crash_startup), else on the first request."""
    consequence, when = first_forward_failure(result, "a TypeError (tensor + None)", with_ids=True)
    return {
        "consequence": consequence,
        "effect": f"a draft asking for {ids}: {when}; every other boundary is served",
    }


_PROBE_LAYERS = 32
_PROBE_REST = (16, 29)  # the rest of a usual three-layer layout, far from index 0


def crashing_ids(
    result: ScanResult, rows: list[ModelRow], file: str, embedding: int | None
) -> dict[int, list[str]] | None:
    """Draft ids a draft may well send (-1, 0, 1 and the convention's embedding id) whose trace through each served
    class raises at this file: id -> the classes. None when no class could be traced (the caller keeps the
    convention's words); empty when every class was traced and none raises."""
    from flowtrace.analysis.trace import trace_row

    candidates = sorted({-1, 0, 1} | ({embedding} if embedding is not None else set()))
    out: dict[int, list[str]] = {}
    decided = False
    for row in rows:
        for i in candidates:
            traced = trace_row(result.project, row, [i, *_PROBE_REST], _PROBE_LAYERS)
            if traced.outcome == F.Outcome.RAISES and traced.raises_at is not None and traced.raises_at.file == file:
                out.setdefault(i, []).append(row.name)
                decided = True
            elif traced.outcome == F.Outcome.CAPTURES:
                decided = True
    return out if decided else None


def _id_words(i: int, embedding: int | None, names: list[str], served: int) -> str:
    """``the embedding (id -1)``, or ``id 0 (b=1 in this engine's convention ...)`` when a
    setter maps another id to index 0; which classes, when not all."""
    only = f" in {_listed(names)}" if len(names) < served else ""
    if embedding is None:
        return f"id {i}{only}"
    if i == embedding:
        return f"the embedding (id {i}){only}"
    return f"id {i} (b={i - embedding} in this engine's convention: the setter maps it to index 0){only}"


def _listed(names: list[str]) -> str:
    names = sorted(dict.fromkeys(names))
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _one_per_loop(result: ScanResult) -> list[list[CaptureSiteFact]]:
    """The unguarded sites grouped by forward and None operand (one cause: one finding, the
    same fingerprint), the site that records the sum directly first."""
    groups: dict[tuple[str, str, str], list[CaptureSiteFact]] = {}
    for ff in result.files:
        for site in ff.capture_sites:
            if site.first_none and site.label_offset is not None and _first_index_is_embedding(site):
                groups.setdefault((site.class_qualname, site.function, site.first_none), []).append(site)
    direct = lambda s: (s.stored_at not in (None, s.location), s.location.line)  # noqa: E731
    return [sorted(g, key=direct) for g in groups.values()]


def _user_rows(result: ScanResult) -> dict[str, list[ModelRow]]:
    """Holder -> the registered EAGLE-3 targets that capture through it (the classes a draft is
    served by; draft heads sharing the model are not)."""
    cc = conventions(result)
    out: dict[str, list[ModelRow]] = {}
    for row in result.rows:
        site = row.chain.site if row.chain is not None and row.capture is not None else None
        if row.registered and site is not None and site.owner and is_target(row, result.project, cc):
            out.setdefault(site.owner, []).append(row)
    return out

"""FT023 id-source-unserved: a model whose ids come from a config attribute or build-context field (no setter) is never
given EAGLE-3 ids.

Engines without a capture setter (LMDeploy) hand the layer ids to the model through a config
attribute a config builder writes, or a build-context field the engine fills, and only for the
methods they handle. For EAGLE-3 two things go wrong (:mod:`flowtrace.analysis.config_capture`
decides which, and where):

- the config builder selected for the architecture refuses the method (``assert spec_method in
  [...]``): the engine stops at start-up, a missing feature (``info``);
- nothing writes the ids for EAGLE-3: the model keeps its default (empty) and captures nothing;
  the draft is served without the aux states it was trained on (``error``: nothing fails; in
  LMDeploy 0.18 the model returns its final hidden state alone, and the EAGLE-3 draft skips its
  fc when that width equals its own, ``llama_eagle3.py`` ``forward``).

One finding per root cause, at the line that decides it (the builder's gate, the build-context
fill, the model's default read), listing every registered target class it affects.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from flowtrace.analysis.config_capture import CAPTURES_NOTHING, REFUSES
from flowtrace.checks.base import Example, Finding, Rule
from flowtrace.checks.targets import conventions, is_target, method_title
from flowtrace.model.consequence import Consequence
from flowtrace.model.facts import Location, Outcome, ProblemKind

if TYPE_CHECKING:
    from flowtrace.analysis.resolve import ModelRow
    from flowtrace.analysis.scan import ScanResult

_MODEL = """\
class ExModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layers = nn.ModuleList([])
        self.aux_hidden_state_layers = getattr(config, 'aux_hidden_state_layers', ())

    def forward(self, hidden_states):
        aux_hidden_states = []
        for idx, layer in enumerate(self.layers):
            if idx in self.aux_hidden_state_layers:
                aux_hidden_states.append(hidden_states)
            hidden_states = layer(hidden_states)
        if len(aux_hidden_states) > 0:
            return dict(hidden_states=hidden_states, aux_hidden_states=torch.cat(aux_hidden_states, dim=-1))
        return hidden_states


class ExForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.model = ExModel(config)

    def forward(self, hidden_states):
        return self.model(hidden_states)
"""
"""A model reading its ids from the config attribute (line 5) and capturing after layer idx."""


def _builder(body: str) -> str:
    """A config builder (line 27) selected for ExForCausalLM whose ``build`` runs ``body`` (from line 34)."""
    return (
        _MODEL
        + f"""

class ExConfigBuilder:
    @classmethod
    def condition(cls, hf_config):
        return hf_config.architectures[0] in ['ExForCausalLM']

    @classmethod
    def build(cls, hf_config, spec_method: str = None):
{body}        return hf_config
"""
    )


class IdSourceUnserved(Rule):
    code = "FT023"
    name = "id-source-unserved"
    consequence = Consequence.SILENT_WRONG
    other_consequences = (Consequence.REFUSED_STARTUP,)
    summary = (
        "A model whose ids come from a config attribute or build-context field is never given EAGLE-3 ids: the engine"
        " refuses the method, or the model captures nothing."
    )
    rationale = (
        "Without a setter the engine decides per method what reaches the model. A builder that refuses EAGLE-3 stops "
        "the engine at start-up (unsupported); a field nothing fills leaves the capture empty, and the draft silently "
        "gets the final hidden state instead of the aux states it was trained on."
    )
    fix = (
        "Write the ids for EAGLE-3 where the engine writes them for the methods it handles (the config builder, or the"
        " build-context fill), or accept the method in the builder's gate."
    )
    valid = (
        Example(
            _builder(
                "        if spec_method == 'eagle3':\n"
                "            n = hf_config.num_hidden_layers\n"
                "            hf_config.aux_hidden_state_layers = (2, n // 2, n - 3)\n"
            ),
            "the builder writes the ids for eagle3",
            profile="lmdeploy",
        ),
    )
    invalid = (
        Example(
            _MODEL, "no builder writes the ids: the default () captures nothing", profile="lmdeploy", line=5,
            kind=ProblemKind.IDS_NEVER_SUPPLIED, message="captures nothing", consequence=Consequence.SILENT_WRONG,
            severity="error",
        ),
        Example(
            _builder(
                "        if spec_method is not None:\n"
                "            assert spec_method in ['ex_mtp', 'dflash']\n"
            ),
            "the builder's gate refuses eagle3 at start-up (the assert, line 35)", profile="lmdeploy", line=35,
            kind=ProblemKind.METHOD_REFUSED, message="method 'eagle3' is refused",
            consequence=Consequence.REFUSED_STARTUP, severity="info",
        ),
    )  # fmt: skip

    def check(self, result: ScanResult) -> Iterator[Finding]:
        project, cc = result.project, conventions(result)
        causes: dict[tuple[Outcome, Location, str], list[ModelRow]] = {}
        for row in result.rows:
            chain = row.chain
            if chain is None or chain.setter_driven or not row.registered or not is_target(row, project, cc):
                continue
            stated = chain.production.decision
            if stated is None:
                continue
            where = stated.location or chain.source.location
            if stated.outcome in (REFUSES, CAPTURES_NOTHING) and where is not None:
                causes.setdefault((stated.outcome, where, stated.reason), []).append(row)
        for (outcome, where, reason), rows in sorted(
            causes.items(), key=lambda item: (item[0][1].file, item[0][1].line, item[0][0])
        ):
            yield self._finding(outcome, where, reason, sorted(rows, key=lambda r: r.qualname), method_title(result))

    def _finding(self, outcome: str, where: Location, reason: str, rows: list[ModelRow], title: str) -> Finding:
        names = ", ".join(dict.fromkeys(r.name for r in rows))
        refused = outcome == REFUSES
        effect = (
            f"the engine stops at start-up for {title} on {names}: unsupported, not served wrong"
            if refused
            else (
                f"{names} capture nothing for {title}: the draft is served without the aux states it was trained on,"
                " and nothing fails"
            )
        )
        return self.finding(
            where,
            f"{names}: {reason}",
            rows[0].qualname,
            f"{outcome}:{where.file}:{reason}",
            kind=ProblemKind.METHOD_REFUSED if refused else ProblemKind.IDS_NEVER_SUPPLIED,
            consequence=Consequence.REFUSED_STARTUP if refused else Consequence.SILENT_WRONG,
            effect=effect,
            steps=(("decided at", where), *(("model", r.location) for r in rows[:4])),
            affects=(r.qualname for r in rows),
        )

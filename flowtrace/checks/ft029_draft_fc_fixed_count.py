"""FT029 draft-fc-fixed-count: an engine's draft class sizes its fc for a literal number of target states that published
drafts it loads do not have."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from flowtrace.analysis.drafts import fixed_state_count
from flowtrace.checks.base import Example, Finding, Rule
from flowtrace.model.consequence import Consequence
from flowtrace.model.facts import ProblemKind

if TYPE_CHECKING:
    from flowtrace.analysis.scan import ScanResult

_DRAFT_CLASS = '''\
class Eagle3Model(Module):
    def __init__(self, config):
        self.fc = Linear(config.target_hidden_size * {count}, config.hidden_size)

    def forward(self, input_ids, aux_hidden_states):
        return self.fc(aux_hidden_states)


class LlamaForCausalLMEagle3(Module):
    def __init__(self, config):
        self.model = Eagle3Model(config)

    def forward(self, input_ids, aux_hidden_states):
        return self.model(input_ids, aux_hidden_states)


EntryClass = LlamaForCausalLMEagle3
'''


class DraftFcFixedCount(Rule):
    code = "FT029"
    name = "draft-fc-fixed-count"
    consequence = Consequence.CRASH_STARTUP
    kind = ProblemKind.DRAFT_FC_FIXED_COUNT
    summary = (
        "An engine's draft class sizes its fc for a literal number of target states that published drafts it loads do"
        " not have."
    )
    rationale = (
        "The draft's fc concatenates one state per target layer it was trained on. A draft class that builds "
        "its fc as `target_hidden_size * 3` loads only drafts of three states; a published draft trained on "
        "four or five (its config names that many ids) does not fit: its fc weight cannot be loaded into the "
        "engine's at start-up. Which drafts the class loads is the draft catalogue's data: the drafts whose own "
        "config names the architecture the class is registered under."
    )
    fix = (
        "Size the fc from the draft config (the number of ids, or num_aux_hidden_states), as the engine's other draft"
        " classes do."
    )
    valid = (
        Example(_DRAFT_CLASS.format(count=3), "three states, as every draft of the catalogue it loads"),
    )
    invalid = (
        Example(
            _DRAFT_CLASS.format(count=2), "two states where the catalogue's drafts of this architecture have three",
            line=3, kind=ProblemKind.DRAFT_FC_FIXED_COUNT, message="sizes its fc for 2 target states",
            consequence=Consequence.CRASH_STARTUP, severity="warning",
        ),
    )

    def check(self, result: ScanResult) -> Iterator[Finding]:
        seen: set[str] = set()
        for row in result.rows:
            if not row.registered:
                continue
            fixed = fixed_state_count(result.project.lookup, row.qualname)
            if fixed is None:
                continue
            loaded = result.drafts.loaded_by(row.architectures)
            misfit = [d for d in loaded if result.drafts.states(d) not in (None, fixed.states)]
            key = f"{fixed.fc.location}"
            if not misfit or key in seen:
                continue
            seen.add(key)
            names = ", ".join(f"{d.name} ({result.drafts.states(d)} states)" for d in misfit[:4])
            more = f" and {len(misfit) - 4} more" if len(misfit) > 4 else ""
            yield self.finding(
                fixed.fc.location,
                f"{row.name} sizes its fc for {fixed.states} target states (`{fixed.fc.in_features}`), but"
                f" {len(misfit)} draft(s) of the catalogue registered as {', '.join(row.architectures)} concatenate"
                f" another number: {names}{more}",
                row.qualname,
                f"{fixed.fc.in_features}:{fixed.states}",
                effect=(
                    f"loading {misfit[0].name} dies at start-up: its fc weight takes"
                    f" {result.drafts.states(misfit[0])} states, the engine's fc {fixed.states}, and the shape mismatch"
                    " does not say which draft layout the class expects"
                ),
            )

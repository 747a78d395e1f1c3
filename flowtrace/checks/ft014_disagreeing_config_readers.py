"""FT014 disagreeing-config-readers: two places read the draft's layer-id key with different defaults."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from flowtrace.model.consequence import Consequence
from flowtrace.checks.base import Example, Finding, Rule
from flowtrace.model.facts import ProblemKind

if TYPE_CHECKING:
    from flowtrace.model.facts import ConfigReadFact
    from flowtrace.analysis.scan import ScanResult


class DisagreeingConfigReaders(Rule):
    code = "FT014"
    name = "disagreeing-config-readers"
    consequence = Consequence.FRAGILE
    summary = "Two places read the draft's layer-id key with different defaults."
    rationale = (
        "The layer ids (and the number of auxiliary states) must be the same wherever they are read. A "
        "reader with a different default makes one part of the engine size the fc for one layout while "
        "another captures a different one."
    )
    kind = ProblemKind.CONFIG_READERS_DISAGREE
    fix = "Read the key in one helper and use it everywhere, with a single default."
    valid = (
        Example(
            """\
def draft_layer_ids(config):
    return getattr(config, "eagle_aux_hidden_state_layer_ids", None)


def aux_count(config):
    return len(draft_layer_ids(config) or [])
""", 'one reader, one default'
        ),
    )
    invalid = (
        Example(
            """\
def draft_layer_ids(config):
    return getattr(config, "eagle_aux_hidden_state_layer_ids", None)


def aux_count(config):
    return len(getattr(config, "eagle_aux_hidden_state_layer_ids", [1, 2, 3, 4]))
""",
            line=6,
            kind=ProblemKind.CONFIG_READERS_DISAGREE,
            message="aux_count reads eagle_aux_hidden_state_layer_ids with default [1, 2, 3, 4]",
            consequence=Consequence.FRAGILE,
            severity="warning",
        ),
    )

    def check(self, result: ScanResult) -> Iterator[Finding]:
        reads: dict[str, list[ConfigReadFact]] = {}
        for ff in result.files:
            for r in ff.config_reads:
                if r.default is not None or "getattr" in r.expression or ".get(" in r.expression:
                    reads.setdefault(r.key, []).append(r)
        def norm(default: str | None) -> str:
            text = " ".join((default or "None").split())
            return "empty" if text in {"None", "[]", "()", "{}", "''", '""'} else text  # all mean "no ids"

        for key, items in sorted(reads.items()):
            defaults = {norm(r.default) for r in items}
            if len(defaults) < 2:
                continue
            first = items[0]
            for r in items[1:]:
                if norm(r.default) == norm(first.default):
                    continue
                yield self.finding(
                    r.location,
                    f"{r.function} reads {key} with default {r.default or 'None'}, but"
                    f" {first.function} ({first.location}) uses {first.default or 'None'}",
                    r.function,
                    f"{key}:{r.default}",
                )

"""Setter shapes and heads (issue 25 items 5 and 6) on tests/fixtures/engines/shapes_like.
Expectations are written from the fixture's code (each file's docstring says what it does)."""

from __future__ import annotations

import pytest

from fixture_paths import FIXTURES
from flowtrace import api
from flowtrace.analysis.trace import trace_row
from flowtrace.index.build import IndexOptions
from flowtrace.model import facts as F

SHAPES_LIKE = FIXTURES / "shapes_like"


@pytest.fixture(scope="module")
def scan():
    return api.scan(SHAPES_LIKE, options=IndexOptions(use_cache=False, jobs=1))


def row(scan, name):
    r = scan.project.row(name)
    assert r is not None, name
    return r


@pytest.mark.parametrize(
    "name, default",
    [
        ("SetDefaultForCausalLM", "{2, num_layers // 2, num_layers - 3}"),
        ("SortedDefaultForCausalLM", "(1, n // 2 - 1, n - 4)"),
    ],
)
def test_conditional_expression_with_a_default_is_identity(scan, name, default):
    c = row(scan, name).capture
    assert c.id_transform == F.IDENTITY and c.effective_transform == F.IDENTITY
    assert c.default_layers == default
    assert "default when no ids" in (c.setter.transform_note or "")


def test_identity_with_default_traces_ids_and_defaults(scan):
    # set_default.py: ids [1, 5] kept as they are; base_lm.py appends before layer i (b = i).
    assert trace_row(scan.project, row(scan, "SetDefaultForCausalLM"), [1, 5], 32).boundaries == (1, 5)
    # sorted_default.py: no ids -> (1, 32 // 2 - 1, 32 - 4) = (1, 15, 28).
    assert trace_row(scan.project, row(scan, "SortedDefaultForCausalLM"), None, 32).boundaries == (1, 15, 28)


@pytest.mark.parametrize("name", ["NextNForCausalLM", "BareForCausalLM"])
def test_heads_whose_model_never_captures_are_not_capturing_rows(scan, name):
    r = row(scan, name)
    assert r.support == "broken"
    kinds = {p.kind for p in r.chain.problems}
    assert F.ProblemKind.NO_CAPTURE_SITE in kinds
    assert r.chain.returns is not None and r.chain.returns.raises  # the wrapper unpacks (hidden, aux)


def test_a_head_overriding_forward_hands_the_states_to_itself(scan):
    # mtp_head.py: `hidden_states = self.model(...)`; `return self.head(input_ids, hidden_states)`.
    r = row(scan, "MtpHeadForCausalLM")
    assert r.capture.holder == "sglang.srt.models.base_lm.BaseModel" and r.support == "broken"
    assert r.chain.returns is not None and str(r.chain.returns.kind) == "not_unpacked"
    assert r.chain.returns.location.file == "sglang/srt/models/mtp_head.py"

"""The hook's capture point from what the layer's code does, not its feed-forward's name
(issue 25 item 3). Expectations from tests/fixtures/engines/trtllm_like/.../modeling_epsilon.py
(its docstring): Epsilon's feed-forward is ``self.block``, followed by a fused add + norm that
takes the residual (output); Zeta keeps computing on the recorded state (not output)."""

from __future__ import annotations

import pytest

from fixture_paths import TRTLLM_LIKE
from flowtrace import api
from flowtrace.analysis.trace import trace_row
from flowtrace.index.build import IndexOptions
from flowtrace.model import facts as F

EPSILON = "tensorrt_llm._torch.models.modeling_epsilon"


@pytest.fixture(scope="module")
def scan():
    return api.scan(TRTLLM_LIKE, options=IndexOptions(use_cache=False, jobs=1))


def _hook(scan, layer: str) -> F.HookCallFact:
    ff = next(f for f in scan.index.files if f.module == EPSILON)
    return next(h for h in ff.sources.hook_calls if h.class_qualname == f"{EPSILON}.{layer}")


def test_the_hook_records_what_the_feed_forward_returned(scan):
    eps = _hook(scan, "EpsilonDecoderLayer")
    assert eps.fed_by == "block" and eps.reworked_after == ()  # all_reduce also takes the residual
    zeta = _hook(scan, "ZetaDecoderLayer")
    assert zeta.fed_by == "block" and zeta.reworked_after == ("post_block",)


def test_a_feed_forward_not_called_mlp_gives_the_layer_output(scan):
    row = scan.project.row("EpsilonForCausalLM")
    assert row.support == "supported" and row.chain.site.point == F.OUTPUT
    assert "self.block" in row.chain.site.note
    assert trace_row(scan.project, row, None, 32).boundaries == (2, 16, 29)  # defaults (1, 15, 28) + 1


def test_a_state_reworked_after_the_hook_is_not_the_output(scan):
    row = scan.project.row("ZetaForCausalLM")
    assert row.chain.site.point == F.UNKNOWN
    assert "post_block" in row.chain.site.note

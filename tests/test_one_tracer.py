"""One tracer for every id source: a row of each kind goes through ``trace_row`` and its
chain names the kind. Expectations are read from the fixtures' code (line numbers included).
"""

import pytest
from fixture_paths import LMDEPLOY_LIKE, SGLANG_LIKE, TRTLLM_LIKE

from flowtrace import api
from flowtrace.analysis.trace import trace_row
from flowtrace.index.build import IndexOptions
from flowtrace.model import facts as F
from flowtrace.model.links import Production, StoreKind, Unmatched

L = 32


@pytest.fixture(scope="module")
def scans():
    options = IndexOptions(use_cache=False, jobs=1)
    return {
        name: api.scan(root, options=options)
        for name, root in (("sglang", SGLANG_LIKE), ("lmdeploy", LMDEPLOY_LIKE), ("trtllm", TRTLLM_LIKE))
    }


def _row(scan, name):
    row = scan.project.row(name)
    assert row is not None, name
    return row


def test_setter_row(scans):
    # sglang_like models/alpha.py: set_eagle3_layers_to_capture adds 1 to explicit ids (line 66);
    # the loop appends before layer i runs, guarding the None residual (line 32): b = i, b = 0 allowed
    scan = scans["sglang"]
    row = _row(scan, "AlphaForCausalLM")
    chain = row.chain
    assert (chain.source.kind, chain.source.reads_draft_ids, chain.production.kind) == (
        F.SourceKind.SETTER,
        True,
        Production.SETTER_CHAIN,
    )
    assert chain.holder.store is StoreKind.ATTRIBUTE
    t = trace_row(scan.project, row, [-1, 14, 30], L)
    assert (t.outcome, t.capture_indices, t.boundaries, t.dropped) == (F.Outcome.CAPTURES, (0, 15, 31), (0, 15, 31), ())


def test_row_without_an_id_source(scans):
    # sglang_like models/plain.py has no setter and no loop; the runner calls the setter
    # unguarded (model_runner.py line 16): AttributeError there
    scan = scans["sglang"]
    row = _row(scan, "PlainForCausalLM")
    assert row.chain is None
    t = trace_row(scan.project, row, [1, 15, 28], L)
    assert t.outcome == F.Outcome.RAISES and str(t.raises_at).endswith("model_executor/model_runner.py:16")


def test_config_attribute_row(scans):
    # lmdeploy_like configurations/alpha.py line 19: (2, n // 2, n - 3) for eagle3, whatever the
    # draft says; models/alpha.py appends before layer idx: L = 32 -> boundaries (2, 16, 29)
    scan = scans["lmdeploy"]
    row = _row(scan, "AlphaForCausalLM")
    chain = row.chain
    assert (chain.source.kind, chain.source.reads_draft_ids, chain.production.kind) == (
        F.SourceKind.CONFIG_ATTRIBUTE,
        False,
        Production.BUILDER_LAYOUT,
    )
    assert chain.holder.store is StoreKind.CONFIG_ATTRIBUTE and chain.production.id_transform == F.Transform.IGNORED
    t = trace_row(scan.project, row, [5, 6], L)
    assert (t.outcome, t.capture_indices, t.boundaries) == (F.Outcome.CAPTURES, (2, 16, 29), (2, 16, 29))
    builder = next(s for s in t.steps if s.kind == "builder")
    assert str(builder.location).endswith("configurations/alpha.py:19")


def test_config_attribute_read_back_from_a_dict_keyed_by_layer(scans):
    # lmdeploy_like models/kappa.py: by_layer[idx] (line 60) read back in config order (line 62);
    # configurations/kappa.py writes (n - 2, 3, n // 2): L = 32 -> (30, 3, 16); L = 3 -> id 3
    # has no layer: KeyError
    scan = scans["lmdeploy"]
    row = _row(scan, "KappaForCausalLM")
    assert (row.chain.concat.order, row.chain.concat.unmatched) == (F.ConcatOrder.CONFIG, Unmatched.RAISES)
    assert trace_row(scan.project, row, None, L).boundaries == (30, 3, 16)
    short = trace_row(scan.project, row, None, 3)
    assert short.outcome == F.Outcome.RAISES and "KeyError" in short.reason


def test_build_context_rows(scans):
    # lmdeploy_like models/quux.py: the context field is filled for 'dflash' only -> nothing for
    # EAGLE-3; configurations/zeta.py line 16 asserts another method -> refused at start-up
    scan = scans["lmdeploy"]
    quux = _row(scan, "QuuxForCausalLM")
    assert (quux.chain.source.kind, quux.chain.holder.store) == (F.SourceKind.BUILD_CONTEXT, StoreKind.CONTEXT_FIELD)
    assert trace_row(scan.project, quux, [1, 2], L).outcome == F.Outcome.CAPTURES_NOTHING
    zeta = trace_row(scan.project, _row(scan, "ZetaForCausalLM"), [1, 2], L)
    assert zeta.outcome == F.Outcome.RAISES and str(zeta.raises_at).endswith("configurations/zeta.py:16")


def test_serving_config_hook_row(scans):
    # trtllm_like modeling_alpha.py: the hook runs after the MLP (line 38): b = i + 1; ids
    # {30, -1, 2} are stored sorted; -1 is the post-final-norm state, a slot but no boundary
    scan = scans["trtllm"]
    row = _row(scan, "AlphaForCausalLM")
    chain = row.chain
    assert (chain.source.kind, chain.production.kind, chain.holder.store) == (
        F.SourceKind.SERVING_CONFIG,
        Production.SERVING_IDS,
        StoreKind.METADATA,
    )
    assert chain.concat.unmatched is Unmatched.EMPTY_SLOT
    t = trace_row(scan.project, row, [30, -1, 2], L, hidden_size=8)
    assert (t.outcome, t.capture_indices, t.boundaries) == (F.Outcome.CAPTURES, (-1, 2, 30), (3, 31))
    assert [i for i, _ in t.dropped] == [-1] and t.extra_slots == 1 and t.fc_in_features == 3 * 8
    # no ids: speculative/metadata.py line 38 defaults to (1, L // 2 - 1, L - 4) = (1, 15, 28)
    assert trace_row(scan.project, row, None, L).boundaries == (2, 16, 29)

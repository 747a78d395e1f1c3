"""Runtime confirmation: the patched fixture engine runs as torch code and the probe sees what
the static trace of the patched tree says (tests/probe/fixture_runtime.py plays the runtime).

All three fixes are written into a copy of fix_seed_like; then, at L = 8, each fixed model is
run with a draft's ids and the captured boundaries are compared with values read from the
fixture code (and with the static trace, by the probe's own claim check):

* NoneResForCausalLM, ids [-1, 3, 4] (ids + 1, recorded before layer i): b = [0, 4, 5]; the
  unpatched model raises TypeError at index 0 (tests/probe/test_agreement.py runs that case);
* SeekV2ForCausalLM, ids [-1, 2, 4] (ids unchanged, recorded after layer i): b = [0, 3, 5]
  (unpatched: [3, 5]);
* VlWrapForConditionalGeneration, ids [1, 3, 4]: what PlainForCausalLM serves, b = [2, 4, 5]
  (unpatched: no setter, the runner cannot hand it the ids).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from flowtrace import api  # noqa: E402
from flowtrace.analysis.trace import trace_json  # noqa: E402
from flowtrace.fix.run import fix_findings  # noqa: E402
from flowtrace.fix.write import write_edits  # noqa: E402
from flowtrace.index.build import IndexOptions  # noqa: E402
from flowtrace.probe import probe_capture  # noqa: E402

HERE = Path(__file__).parent
PROBE_DIR = HERE / "probe"
L = 8
OPTIONS = IndexOptions(use_cache=False, jobs=1)

CASES = {
    "NoneResForCausalLM": ([-1, 3, 4], (0, 4, 5)),
    "SeekV2ForCausalLM": ([-1, 2, 4], (0, 3, 5)),
    "VlWrapForConditionalGeneration": ([1, 3, 4], (2, 4, 5)),
}


@pytest.fixture(scope="module")
def patched(tmp_path_factory):
    root = tmp_path_factory.mktemp("fixed") / "engine"
    shutil.copytree(
        HERE / "fixtures/engines/fix_seed_like", root, ignore=shutil.ignore_patterns("__pycache__", ".flowtrace_cache")
    )
    result = api.scan(root, options=OPTIONS)
    report = fix_findings(result, api.findings(result), options=OPTIONS)
    assert len(report.offered) == 3
    assert all(r.written for r in write_edits(root, report.edits()))
    before = set(sys.modules)
    yield root, api.scan(root, options=OPTIONS)
    for name in set(sys.modules) - before:
        if name.split(".")[0] in {"sglang", "fixture_runtime"}:
            del sys.modules[name]


@pytest.mark.parametrize("model", sorted(CASES))
def test_the_patched_fixture_serves_the_boundaries_at_runtime(patched, model, tmp_path):
    root, scan = patched
    ids, want = CASES[model]
    row = scan.model(model)
    sys.path.insert(0, str(PROBE_DIR))
    try:
        from fixture_runtime import target_config
    finally:
        sys.path.remove(str(PROBE_DIR))
    config = target_config(L, row.name)
    traced = api.trace(scan, model, ids, L, 16, config)
    assert traced.boundaries == want  # the static half, on the patched tree
    claim = trace_json(traced)
    claim.setdefault("outcome", "captures")
    claim_file = tmp_path / "trace.json"
    claim_file.write_text(json.dumps(claim))
    args = {"root": str(root), "qualname": row.qualname, "num_layers": L, "layer_ids": ids,
            "setter": row.capture.setter.method, "getters": [], "config": config}
    result = probe_capture(
        factory="fixture_runtime:build",
        factory_args=args,
        path=[str(PROBE_DIR)],
        device="cpu",
        expect_trace=str(claim_file),
    )
    assert result.outcome == "captures", result.raised
    assert result.boundaries == want
    assert result.verdict == "confirmed", [s.evidence for s in result.slots]

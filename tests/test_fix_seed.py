"""The founding story, end to end: a SpecForge draft trained on [embedding, out 2, out 30]
against a DeepSeek-like model that cannot capture the embedding (fix_seed_like/seek.py).

SpecForge ids mean "output of layer i", -1 the embedding: [-1, 2, 30] is b = [0, 3, 31]. seek.py
records each layer's output (index i -> b = i + 1) with the ids unchanged, so before the fix it
serves b = [3, 31] (-1 is no loop index): MISMATCH. Fix 3 records the stream before the loop
when -1 is requested, so it serves [0, 3, 31]: MATCH, with the draft config untouched.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from flowtrace import api
from flowtrace.fix.run import fix_findings
from flowtrace.fix.write import write_edits
from flowtrace.index.build import IndexOptions

from fixture_paths import FIXTURES

OPTIONS = IndexOptions(use_cache=False, jobs=1)


def configs(tmp_path: Path) -> tuple[Path, Path]:
    target = tmp_path / "target.json"
    target.write_text(json.dumps({"architectures": ["SeekV2ForCausalLM"], "num_hidden_layers": 32, "hidden_size": 64}))
    draft = tmp_path / "draft.json"
    draft.write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"], "target_hidden_size": 64,
                                 "eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 2, 30]}}, indent=2) + "\n")
    return target, draft


def test_fix3_makes_the_specforge_draft_match_without_changing_it(tmp_path):
    root = tmp_path / "engine"
    shutil.copytree(FIXTURES / "fix_seed_like", root, ignore=shutil.ignore_patterns("__pycache__", ".flowtrace_cache"))
    target, draft = configs(tmp_path)
    draft_bytes = draft.read_bytes()

    before = api.compat(api.scan(root, options=OPTIONS), target, draft)
    assert before.verdict == "MISMATCH"
    assert before.trained == (0, 3, 31) and before.served == (3, 31)

    result = api.scan(root, options=OPTIONS)
    report = fix_findings(result, api.findings(result, ("FT009",)), options=OPTIONS)
    assert [v.proposal.symbol for v in report.offered] == ["sglang.srt.models.seek.SeekV2ForCausalLM"]
    assert all(r.written for r in write_edits(root, report.edits()))

    after = api.compat(api.scan(root, options=OPTIONS), target, draft)
    assert after.verdict == "MATCH", after.differences
    assert after.served == (0, 3, 31)
    assert draft.read_bytes() == draft_bytes

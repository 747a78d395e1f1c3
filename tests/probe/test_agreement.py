"""Static = runtime: ``flowtrace trace`` and the probe agree on every fixture engine.

Every engine tree under ``tests/fixtures/engines`` and ``tests/probe/agreement_engines`` is
discovered, scanned, and each registered model class is traced with several id sets; the same
class is then built at tiny size as torch code (``fixture_runtime``), its setter called with the
same ids, and ``probe capture --expect-trace`` judges the trace's claim on real tensors:

* ``captures``: the probe must observe exactly the traced boundaries, in order;
* ``raises``: the run must raise, at the trace's ``raises_at`` when it names one;
* ``captures_nothing``: nothing may reach the concat, the fc or the model output.

A fixture that cannot run as torch code is skipped with the reason (``UNRUNNABLE``); a known
disagreement is a strict xfail with its reason (``KNOWN``), so it turns into a failure the
moment the analyzer learns the shape and the entry must go. New fixtures are covered without
editing this file; a new disagreement fails until it is fixed or explained here.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.probe
torch = pytest.importorskip("torch")

from flowtrace import api  # noqa: E402
from flowtrace.analysis.trace import trace_json  # noqa: E402
from flowtrace.index.build import IndexOptions  # noqa: E402
from flowtrace.probe import probe_capture  # noqa: E402

from fixture_runtime import target_config  # noqa: E402  (tests/probe is on sys.path, as pytest imports)

HERE = Path(__file__).parent
FIXTURES = HERE.parent / "fixtures" / "engines"
PROBE_ENGINES = HERE / "agreement_engines"
L = 8  # layers of every tiny target

ID_SETS: dict[str, list[int] | None] = {
    "default": None,  # the engine's own default (setter(None), or the default getter's ids)
    "specforge": [-1, 3, 4],  # "output of layer i", -1 = embedding (SpecForge / SGLang drafts)
    "identity": [0, 3, 6],  # ids that start at 0, as identity-transform engines read them
    "out_of_range": [1, 3, 99],  # one id past the last layer
    "unsorted": [5, -1, 2],  # loop order and config order differ
}

# Wrappers whose language model the target config names (``text_config.architectures``), with
# the text architecture the tiny target's config gives them, from reading each fixture:
# (tree, model) -> architecture. The run builds that class; the trace is handed the same config.
TEXT_ARCHITECTURE = {
    ("vllm_like", "LlavaLikeForConditionalGeneration"): "LlamaForCausalLM",  # llava_like.py:4-6
}

# Trees with their own runner module, which hands the ids to the model (module, class, method),
# from reading each: the run goes through it, so its checks are part of the run.
RUNNERS = {
    "sglang_like": ("sglang.srt.model_executor.model_runner", "ModelRunner", "init_aux_hidden_state_capture"),
    "vllm_like": ("vllm.v1.worker.model_runner", "ModelRunner", "setup_aux_hidden_state_outputs"),
}

# Models whose stand-in code cannot run as torch code, with why: (tree, model) -> reason
# (skipped, counted in the note).
UNRUNNABLE = {
    **{("shapes_like", m): (
        "its forward takes a serving batch (`batch.forward_mode.is_idle()`) the stand-in runtime does not build, "
        "and its layer list is empty (shapes_like/.../routed_return.py): the fixture is about the return path "
        "FT020 follows (tests/test_routed_return.py), not the capture layout"
    ) for m in ("RoutedCutForCausalLM", "RoutedKeptForCausalLM")},
    ("sglang_like", "SigmaVLForConditionalGeneration"): (
        "its forward calls GammaForCausalLM, which defines no forward in the fixture "
        "(sglang_like/.../gamma.py): the stand-in cannot run. Its static answer (no setter, so "
        "nothing is captured) rests on the missing setter, which needs no run"
    ),
}

# Disagreements the analyzer does not handle yet: (tree, model, id set or "*") -> what the
# run shows. Each is a strict xfail: when the trace learns the shape, the entry must go.
KNOWN: dict[tuple[str, str, str], str] = {
}

# What the probe-side shape fixtures do at runtime, written from reading them (L = 8). This
# checks the runtime half on its own, whatever the trace says.
SHAPES_RUNTIME: dict[str, dict[str, tuple]] = {
    "HelperForCausalLM": {  # helper: label i before layer i (b=i), label L after the loop; ids + 1
        "default": ("captures", (2, 4, 5)), "specforge": ("captures", (0, 4, 5)),
        "identity": ("captures", (1, 4, 7)), "out_of_range": ("captures", (2, 4)),
        "unsorted": ("captures", (0, 3, 6)),
    },
    "HookForCausalLM": {  # hook after layer idx's MLP (b=idx+1); ids unchanged, -1 never matches
        "default": ("captures", (3, 5, 6)), "specforge": ("captures", (4, 5)),
        "identity": ("captures", (1, 4, 7)), "out_of_range": ("captures", (2, 4)),
        "unsorted": ("captures", (3, 6)),
    },
    "DictForCausalLM": {  # dict by layer (b=i), returned in config order; ids + 1
        "default": ("captures", (2, 4, 5)), "specforge": ("captures", (0, 4, 5)),
        "identity": ("captures", (1, 4, 7)), "out_of_range": ("captures", (2, 4)),
        "unsorted": ("captures", (6, 0, 3)),
    },
    "FlagReturnForCausalLM": {  # flagged layer returns its input (b=i), dict read in config order; ids + 1
        "default": ("captures", (2, 4, 5)), "specforge": ("captures", (0, 4, 5)),
        "identity": ("captures", (1, 4, 7)), "out_of_range": ("captures", (2, 4)),
        "unsorted": ("captures", (6, 0, 3)),
    },
    "SlotsForCausalLM": {  # fixed slots (b=i), ids unchanged; fewer states than slots raises
        "default": ("captures", (2, 4, 5)), "specforge": ("raises", "fixed_slots.py:19"),
        "identity": ("captures", (0, 3, 6)), "out_of_range": ("raises", "fixed_slots.py:19"),
        "unsorted": ("raises", "fixed_slots.py:19"),
    },
    "FoldedForCausalLM": {  # layers add the residual themselves; hidden after layer i (b=i+1); ids + 1
        "default": ("captures", (2, 4, 5)), "specforge": ("captures", (4, 5)),
        "identity": ("captures", (1, 4, 7)), "out_of_range": ("captures", (2, 4)),
        "unsorted": ("captures", (3, 6)),
    },
    "BufferCopyForCausalLM": {  # buf[k].copy_(h + r) after layer i (b=i+1); ids unchanged, -1 never matches
        "default": ("captures", (3, 5, 6)), "specforge": ("captures", (4, 5)),
        "identity": ("captures", (1, 4, 7)), "out_of_range": ("captures", (2, 4)),
        "unsorted": ("captures", (3, 6)),
    },
    "FlagForCausalLM": {  # layers[i] flagged, read back before layer i (b=i); ids unchanged; -k marks layer L-k
        "default": ("captures", (2, 4, 5)), "specforge": ("captures", (3, 4, 7)),
        "identity": ("captures", (0, 3, 6)), "out_of_range": ("raises", "layer_flag.py:18"),
        "unsorted": ("captures", (2, 5, 7)),
    },
    "NoneResidualForCausalLM": {  # hidden + residual before layer i (b=i), residual None at i=0; ids + 1
        "default": ("captures", (2, 4, 5)), "specforge": ("raises", "none_residual.py:18"),
        "identity": ("captures", (1, 4, 7)), "out_of_range": ("captures", (2, 4)),
        "unsorted": ("raises", "none_residual.py:18"),
    },
}


def engine_roots() -> list[Path]:
    """Every fixture engine tree: the shared ones and the probe's own shape fixtures."""
    roots = [p for p in sorted(FIXTURES.iterdir()) if p.is_dir()]
    return roots + [p for p in sorted(PROBE_ENGINES.iterdir()) if p.is_dir()]


_SCANS: dict[Path, object] = {}


def scan_of(root: Path):
    if root not in _SCANS:
        _SCANS[root] = api.scan(root, options=IndexOptions(use_cache=False, jobs=1))
    return _SCANS[root]


def _marks(tree: str, model: str, id_set: str) -> list:
    why = UNRUNNABLE.get((tree, model)) or UNRUNNABLE.get((tree, "*"))
    if why:
        return [pytest.mark.skip(reason=f"unrunnable: {tree} {model}: {why}")]
    reason = KNOWN.get((tree, model, id_set)) or KNOWN.get((tree, model, "*"))
    return [pytest.mark.xfail(strict=True, reason=f"{model}: {reason}")] if reason else []


def cases() -> list:
    out = []
    for root in engine_roots():
        for row in scan_of(root).rows:
            if not row.registered:  # inner holders are reached through their entry class
                continue
            skip = None
            source = row.chain.source if row.chain is not None and row.capture is None else None
            if source is not None and source.word != "config":
                # No setter: a build context or serving config decides the ids, which
                # fixture_runtime does not play (a config attribute it does: the engine's config
                # builder runs first); tests/test_engine_profiles.py runs these fixtures as
                # torch code with the engine's own id source instead.
                skip = [
                    pytest.mark.skip(
                        reason=f"{row.name}: ids from {source.word} ({source.key}), not a setter the probe calls"
                    )
                ]
            for id_set in ID_SETS:
                out.append(pytest.param(root, row.name, id_set, marks=skip or _marks(root.name, row.name, id_set),
                                        id=f"{root.name}-{row.name}-{id_set}"))
    return out


@pytest.fixture(autouse=True, scope="module")
def _isolated_imports():
    """The engine trees share package names (sglang, vllm): drop what they imported."""
    before = set(sys.modules)
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
    for name in set(sys.modules) - before:
        if name.split(".")[0] in {"sglang", "vllm", "fixture_runtime"}:
            del sys.modules[name]


def static_outcome(result, row) -> str | None:
    """The trace's outcome; for a trace without the ``outcome`` field, the one its fields
    state plainly (boundaries, none, or a class without a setter), else None. ``unknown``
    (a link the trace could not decide) is None too."""
    outcome = getattr(result, "outcome", None)
    if outcome is not None:
        outcome = str(getattr(outcome, "value", outcome))
        return None if outcome == "unknown" else outcome
    if result.boundaries:
        return "captures"
    if result.boundaries == () or row.support == "none":
        return "captures_nothing"
    return None


def config_of(root: Path, row) -> dict:
    """The tiny target's config.json, the one document both the run and the trace read."""
    return target_config(L, row.name, TEXT_ARCHITECTURE.get((root.name, row.name)))


def run_probe(root: Path, row, scan, layer_ids, claim_file: Path | None):
    getters = sorted({g for p in scan.profiles for g in p.default_getters})
    args = {
        "root": str(root), "qualname": row.qualname, "num_layers": L, "layer_ids": layer_ids,
        "setter": row.capture.setter.method if row.capture else None, "getters": getters,
        "config": config_of(root, row),
    }
    if root.name in RUNNERS:
        args["runner"] = list(RUNNERS[root.name])
    # an engine whose config builders write the capture attribute (profile data, no names here)
    built = next((p for p in scan.profiles if p.builder_selector and p.builder_method), None)
    if built is not None:
        args["builder"] = [built.builder_selector, built.builder_method]
        args["spec_method"] = [built.method_variables[0], built.method]
    return probe_capture(
        factory="fixture_runtime:build", factory_args=args, path=[str(HERE)], device="cpu",
        expect_trace=None if claim_file is None else str(claim_file),
    )


@pytest.mark.parametrize("root,model,id_set", cases())
def test_probe_agrees_with_trace(root, model, id_set, tmp_path):
    scan = scan_of(root)
    row = scan.model(model)
    ids = ID_SETS[id_set]
    traced = api.trace(scan, model, ids, L, 16, config_of(root, row))
    outcome = static_outcome(traced, row)
    assert outcome is not None, f"trace gives no outcome: {traced.problems}"
    claim = trace_json(traced)
    claim.setdefault("outcome", outcome)
    claim_file = tmp_path / "trace.json"
    claim_file.write_text(json.dumps(claim))
    result = run_probe(root, row, scan, ids, claim_file)
    assert result.outcome == outcome, (result.outcome, result.raised, result.boundaries)
    if outcome == "captures":
        assert result.boundaries == traced.boundaries
    assert result.verdict == "confirmed", [s.evidence for s in result.slots]


@pytest.mark.parametrize(
    "model,id_set",
    [(m, s) for m, by in SHAPES_RUNTIME.items() for s in by],
)
def test_shape_fixtures_run_as_read(model, id_set, tmp_path):
    """The runtime half alone: the probe sees what reading the shape fixture says."""
    root = PROBE_ENGINES / "shapes"
    scan = scan_of(root)
    kind, want = SHAPES_RUNTIME[model][id_set]
    claim = None
    if kind == "raises":  # claimed, so that the run's raise is an observation, not an error
        claim = tmp_path / "claim.json"
        claim.write_text(json.dumps({"boundaries": None, "outcome": "raises", "raises_at": want}))
    result = run_probe(root, scan.model(model), scan, ID_SETS[id_set], claim)
    assert result.outcome == kind, result.raised
    if kind == "captures":
        assert result.boundaries == want
    else:
        assert result.verdict == "confirmed", [s.evidence for s in result.slots]


def test_every_fixture_tree_is_discovered():
    names = {r.name for r in engine_roots()}
    assert {"sglang_like", "vllm_like", "shapes"} <= names
    ran = {p.values[1] for p in cases()}
    assert {"AlphaForCausalLM", "LlamaForCausalLM", "HelperForCausalLM", "NoneResidualForCausalLM"} <= ran
    stale = [k for k in KNOWN if k[0] not in names or k[1] not in ran]
    assert not stale, f"KNOWN names models no fixture has: {stale}"


def test_theta_runtime_feeds_the_mutated_residual_in_every_slot():
    """From reading theta.py: the loop stores a reference to ``residual`` and then does
    ``residual += delta``, so every stored entry ends as the final stream, b=L. Its layers return
    a delta, which the probe must recognise to name b=L at all."""
    root = FIXTURES / "sglang_like"
    scan = scan_of(root)
    result = run_probe(root, scan.model("ThetaForCausalLM"), scan, [-1, 3, 4], None)
    assert result.boundaries == (L, L, L)
    assert any("return a delta" in w for w in result.warnings)


def test_merged_results_mark_each_model_in_the_json_and_the_html_report(tmp_path):
    """``probe merge`` sums runs up per model; the report marks each model's matrix row."""
    from click.testing import CliRunner

    from flowtrace.cli.main import main
    from flowtrace.render.html import render_html
    from flowtrace.render.report_data import report_document

    root = FIXTURES / "sglang_like"
    scan = scan_of(root)
    files = []
    for model, id_set in [("AlphaForCausalLM", "specforge"), ("AlphaForCausalLM", "identity"),
                          ("ThetaForCausalLM", "specforge"), ("GammaForCausalLM", "identity")]:
        row, ids = scan.model(model), ID_SETS[id_set]
        claim = tmp_path / f"{model}-{id_set}.trace.json"
        claim.write_text(json.dumps(trace_json(api.trace(scan, model, ids, L, 16))))
        out = tmp_path / f"{model}-{id_set}.probe.json"
        out.write_text(run_probe(root, row, scan, ids, claim).to_json())
        files.append(str(out))
    merged_file = tmp_path / "merged.json"
    r = CliRunner().invoke(main, ["probe", "merge", *files, "-o", str(merged_file)])
    assert r.exit_code == 0, r.output  # Theta's slots are all b=L, as the trace now says (FT013 still flags it)
    merged = json.loads(merged_file.read_text())
    verdicts = {m["model"]: (m["verdict"], m["runs"]) for m in merged["models"]}
    pkg = "sglang.srt.models"  # the trace names a model by its qualified name
    assert verdicts == {f"{pkg}.alpha.AlphaForCausalLM": ("confirmed", 2),
                        f"{pkg}.gamma.GammaForCausalLM": ("confirmed", 1),
                        f"{pkg}.theta.ThetaForCausalLM": ("confirmed", 1)}
    assert merged["summary"] == {"confirmed": 3, "refuted": 0, "inconclusive": 0}
    html = render_html(report_document(scan, []), probe=merged)
    for model, mark in [("AlphaForCausalLM", "confirmed"), ("ThetaForCausalLM", "confirmed"),
                        ("GammaForCausalLM", "confirmed")]:
        row = re.search(rf'<tr data-model="[^"]*"[^>]*>\s*<td data-sort="{model.lower()}">.*?</tr>', html, re.S)
        assert row is not None, model
        assert f'class="badge probe-{mark}"' in row.group(0), (model, mark)
    plain = re.search(r'<tr data-model="[^"]*"[^>]*>\s*<td data-sort="betaforcausallm">.*?</tr>', html, re.S)
    assert plain is not None and "badge probe-" not in plain.group(0)  # not probed: no mark

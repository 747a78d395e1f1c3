"""``flowtrace probe draft``: a draft trained here on a known layout must pick that layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.probe
torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from click.testing import CliRunner  # noqa: E402

from flowtrace.probe.cli import probe  # noqa: E402

HERE = Path(__file__).parent
TRAINED = (1, 3, 5)
TARGET = ["--factory", "probe_tiny_targets:make_learnable", "--path", str(HERE)]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def trained_draft(tmp_path_factory, _one_thread):
    from probe_draft_training import write_draft

    return write_draft(tmp_path_factory.mktemp("draft135"), TRAINED)


@pytest.fixture(scope="module")
def random_draft(tmp_path_factory, _one_thread):
    from probe_draft_training import train_draft

    from flowtrace.probe.draft import Eagle3Draft, save_draft

    trained, _ = train_draft(TRAINED, steps=0)  # same config, untrained weights
    torch.manual_seed(123)
    fresh = Eagle3Draft(trained.cfg, with_embeddings=False)
    fresh.d2t.copy_(trained.d2t)
    return save_draft(fresh, tmp_path_factory.mktemp("random"))


def draft_json(draft: Path, *args: str) -> tuple[int, dict]:
    r = CliRunner().invoke(probe, ["draft", str(draft), *TARGET, "--format", "json", *args])
    assert r.exit_code in (0, 1), r.output
    return r.exit_code, json.loads(r.stdout)


def test_trained_layout_ranks_first_with_clear_margin(trained_draft):
    code, data = draft_json(trained_draft, "--random-tokens", "192", "--seed", "3")
    assert data["schema"] == "flowtrace.probe/1"
    assert data["verdict"] == "clear winner" and code == 0
    assert data["boundaries"] == list(TRAINED)
    best, second = data["candidates"][0], data["candidates"][1]
    assert best["boundaries"] == list(TRAINED)
    assert best["accuracy"] > 0.8
    assert data["margin"] >= 0.15, data["candidates"][:3]
    assert best["accuracy"] - second["accuracy"] == pytest.approx(data["margin"], abs=1e-6)
    # the config's own ids (0, 2, 4 = outputs of layers 0, 2, 4) are read as boundaries 1, 3, 5
    assert data["draft"]["config_boundaries"] == [1, 3, 5]
    assert data["draft"]["embeddings"] == "target" and data["draft"]["draft_vocab_size"] == 64
    # the off-by-one readings are among the candidates and lose
    layouts = [c["boundaries"] for c in data["candidates"]]
    assert [0, 2, 4] in layouts and [2, 4, 6] in layouts
    assert set(data["timings"]) >= {"load_draft", "build_target", "target_forward", "score_layouts", "total"}


def test_claim_confirmed_and_refuted(trained_draft, tmp_path):
    code, data = draft_json(trained_draft, "--expect", "1,3,5")
    assert code == 0 and data["claim_verdict"] == "confirmed"
    code, data = draft_json(trained_draft, "--expect", "0,2,4")
    assert code == 1 and data["claim_verdict"] == "refuted"
    assert "[b=1, b=3, b=5]" in data["claim_evidence"]
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"model": "m", "boundaries": [2, 4, 6]}))
    code, data = draft_json(trained_draft, "--expect-trace", str(trace))
    assert code == 1 and data["claim_verdict"] == "refuted"


def test_text_report(trained_draft, tmp_path):
    toks = tmp_path / "prompts.txt"
    g = torch.Generator().manual_seed(9)
    toks.write_text("\n".join(" ".join(map(str, torch.randint(0, 96, (48,), generator=g).tolist())) for _ in range(4)))
    r = CliRunner().invoke(probe, ["draft", str(trained_draft), *TARGET, "--tokens", str(toks)])
    assert r.exit_code == 0, r.output
    assert "winner: [b=1, b=3, b=5]" in r.stdout
    assert "188 positions in 4 sequence(s)" in r.stdout


def test_random_draft_has_no_clear_winner(random_draft):
    code, data = draft_json(random_draft, "--random-tokens", "192")
    assert data["verdict"] == "no clear winner" and code == 1
    assert data["boundaries"] is None
    assert "beyond the layout" in data["reason"] or "within" in data["reason"]


def test_shuffled_lm_head_has_no_clear_winner(trained_draft, tmp_path):
    from safetensors.torch import load_file, save_file

    sd = load_file(str(trained_draft / "model.safetensors"))
    g = torch.Generator().manual_seed(0)
    sd["lm_head.weight"] = sd["lm_head.weight"][torch.randperm(sd["lm_head.weight"].shape[0], generator=g)]
    out = tmp_path / "shuffled"
    out.mkdir()
    save_file(sd, str(out / "model.safetensors"))
    (out / "config.json").write_text((trained_draft / "config.json").read_text())
    code, data = draft_json(out, "--random-tokens", "192")
    assert data["verdict"] == "no clear winner" and code == 1
    assert "beyond the layout" in data["reason"]


def test_layers0_key_naming_and_bin_format(trained_draft, tmp_path):
    from safetensors.torch import load_file

    sd = load_file(str(trained_draft / "model.safetensors"))
    renamed = {("layers.0." + k[len("midlayer."):] if k.startswith("midlayer.") else k): v for k, v in sd.items()}
    out = tmp_path / "bin"
    out.mkdir()
    torch.save(renamed, out / "pytorch_model.bin")
    (out / "config.json").write_text((trained_draft / "config.json").read_text())
    code, data = draft_json(out)
    assert data["draft"]["weights_file"] == "pytorch_model.bin"
    assert data["boundaries"] == list(TRAINED) and code == 0


def _broken_copy(src: Path, dst: Path, mutate) -> Path:
    from safetensors.torch import load_file, save_file

    sd = load_file(str(src / "model.safetensors"))
    cfg = json.loads((src / "config.json").read_text())
    mutate(sd, cfg)
    dst.mkdir()
    save_file(sd, str(dst / "model.safetensors"))
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


@pytest.mark.parametrize(
    "mutate,needle",
    [
        (lambda sd, cfg: sd.pop("midlayer.hidden_norm.weight"), "missing required key 'midlayer.hidden_norm.weight'"),
        (lambda sd, cfg: sd.__setitem__("midlayer.self_attn.q_proj.weight", torch.zeros(32, 32)),
         "midlayer.self_attn.q_proj.weight has shape (32, 32), expected (32, 64)"),
        (lambda sd, cfg: sd.__setitem__("fc.weight", torch.zeros(32, 100)), "fc.weight has shape (32, 100)"),
        (lambda sd, cfg: cfg.pop("hidden_size"), "missing key 'hidden_size'"),
        (lambda sd, cfg: sd.pop("d2t"), "no d2t table"),
    ],
    ids=["missing-key", "q-shape", "fc-width", "config-key", "no-d2t"],
)
def test_checkpoint_errors_name_key_and_shapes(trained_draft, tmp_path, mutate, needle):
    broken = _broken_copy(trained_draft, tmp_path / "broken", mutate)
    r = CliRunner().invoke(probe, ["draft", str(broken), *TARGET])
    assert r.exit_code == 2, r.output
    assert needle in r.output and "Traceback" not in r.output


def test_norm_before_residual_flag_changes_the_forward(trained_draft):
    from flowtrace.probe.draft import load_draft

    a = load_draft(trained_draft)
    assert not a.config.norm_before_residual
    ids = torch.randint(0, 96, (1, 8))
    aux = torch.randn(1, 8, 96)
    emb = torch.nn.Embedding(96, 32)
    a.module.use_embeddings(emb)
    before = a.module(ids, aux)
    a.module.midlayer.norm_before_residual = True
    after = a.module(ids, aux)
    assert not torch.allclose(before, after)


def test_candidate_layouts_cover_off_by_one_and_embedding():
    from flowtrace.probe.layout_scoring import candidate_layouts

    c = {x.boundaries: x.sources for x in candidate_layouts([("draft config", (1, 16, 29))], 32, 3)}
    for lay in [(1, 16, 29), (0, 15, 28), (2, 17, 30), (0, 16, 29), (1, 15, 29), (1, 16, 30), (0, 1, 16)]:
        assert lay in c, lay
    assert all(len(k) == 3 and max(k) <= 32 for k in c)
    assert candidate_layouts([("x", (1, 2))], 5, 3) == []


def test_embedding_layout_from_config_ids_minus_one(tmp_path):
    # ids (-1, 1, 3) in the draft config mean: embedding, output of layer 1, output of layer 3
    from probe_draft_training import write_draft

    d = write_draft(tmp_path / "d024", (0, 2, 4), seed=1)
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [-1, 1, 3]
    code, data = draft_json(d, "--random-tokens", "192")
    assert data["draft"]["config_boundaries"] == [0, 2, 4]
    assert data["boundaries"] == [0, 2, 4] and code == 0
    assert data["margin"] >= 0.15

"""Train a tiny EAGLE-3 draft on a known layout, for the ``probe draft`` tests.

The draft learns, teacher-forced at step 0, to predict the target's argmax at t+1 from the aux
states of position t (the chosen boundaries) and the embedding of token t+1 - exactly what
``probe draft`` later measures. A few hundred Adam steps on CPU take seconds.
"""

from __future__ import annotations

from pathlib import Path

import torch

from flowtrace.probe.draft import DraftConfig, Eagle3Draft, save_draft
from probe_tiny_targets import HEADS, H, V, make_learnable


@torch.no_grad()
def teacher_data(model, n_seqs: int, seq_len: int, seed: int):
    """ids [N, T], boundary streams [N, L+1, T, H], target argmax [N, T]."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, V, (n_seqs, seq_len), generator=g)
    streams, logits = model.boundaries(ids)  # [L+1, N, T, H], [N, T, V]
    return ids, streams.permute(1, 0, 2, 3).contiguous(), logits.argmax(-1)


def draft_vocab_map(labels: torch.Tensor, size: int) -> torch.Tensor:
    """Target ids of the ``size`` most frequent labels, ascending (the draft vocabulary)."""
    counts = torch.bincount(labels.reshape(-1), minlength=V)
    return counts.topk(size).indices.sort().values


def train_draft(boundaries, steps: int = 150, seed: int = 0, draft_vocab: int = 64,
                n_seqs: int = 96, seq_len: int = 24, lr: float = 3e-3):
    """Returns (draft, target). The draft shares the target's embeddings (none are saved)."""
    model, _ = make_learnable()
    ids, streams, argmax = teacher_data(model, n_seqs, seq_len, seed + 100)
    keep = draft_vocab_map(argmax[:, 1:], draft_vocab)
    t2d = torch.full((V,), -1, dtype=torch.long)
    t2d[keep] = torch.arange(draft_vocab)
    cfg = DraftConfig(
        hidden_size=H, num_attention_heads=HEADS, num_key_value_heads=2, head_dim=H // HEADS,
        intermediate_size=2 * H, vocab_size=V, draft_vocab_size=draft_vocab, target_hidden_size=H,
        n_aux=len(boundaries), aux_layer_ids=tuple(b - 1 for b in boundaries),
    )
    torch.manual_seed(seed)
    draft = Eagle3Draft(cfg)
    draft.d2t.copy_(keep - torch.arange(draft_vocab))
    draft.use_embeddings(model.model.embed_tokens)  # shared with the target, not trained
    params = [p for n, p in draft.named_parameters() if not n.startswith("embed_tokens")]
    opt = torch.optim.Adam(params, lr=lr)
    aux = torch.cat([streams[:, b, :-1] for b in boundaries], dim=-1)  # [N, T-1, n*H]
    nxt = ids[:, 1:]
    labels = t2d[argmax[:, 1:]]  # -1 where the label is outside the draft vocab
    for _ in range(steps):
        opt.zero_grad()
        logits = draft(nxt, aux)
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, draft_vocab), labels.reshape(-1), ignore_index=-1
        )
        loss.backward()
        opt.step()
    draft.embed_tokens = None
    return draft, model


def write_draft(out: Path, boundaries, **kw) -> Path:
    draft, _ = train_draft(boundaries, **kw)
    return save_draft(draft, out)

"""A raw observation of aux hidden states before matching: where it was seen and its chunks."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class RawObservation:
    """Chunks (each ``[..., hidden]``, cloned) seen at one place, in slot order."""

    source: str
    kind: str  # "fc-input" | "concat" | "model-output"
    chunks: tuple[torch.Tensor, ...]
    # True when the tensors only *look* like aux states by width (any hidden-size concat, a
    # packed output whose width happens to be k*H): such observations are dropped unless a
    # chunk matches a boundary.
    incidental: bool = False


def split_packed(t: torch.Tensor, hidden: int) -> tuple[torch.Tensor, ...]:
    """Split a ``[..., k*hidden]`` tensor into k ``[..., hidden]`` chunks (cloned)."""
    return tuple(c.detach().clone() for c in torch.split(t, hidden, dim=-1))

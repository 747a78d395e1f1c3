"""Spy on ``torch.cat`` / ``torch.concat`` / ``torch.concatenate`` with a TorchFunctionMode.

Engines build the draft input as ``cat([aux_0, aux_1, ...], dim=-1)``; the three names are
distinct functions in torch, so all three are watched. Only calls that join at least two tensors
of the target hidden size along the last dimension are kept (rotary ``cat``s on head_dim and KV
cache ``cat``s along the sequence are not). Inputs are cloned at call time.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from flowtrace.probe.observed import RawObservation

_WATCHED = {torch.cat: "torch.cat", torch.concat: "torch.concat", torch.concatenate: "torch.concatenate"}


class ConcatSpy(TorchFunctionMode):
    """Records qualifying concatenations; ``observations`` lists them in call order."""

    def __init__(self, hidden_size: int, max_calls: int = 64) -> None:
        super().__init__()
        self.hidden = hidden_size
        self.max_calls = max_calls
        self.observations: list[RawObservation] = []
        self.dropped = 0
        self._calls = 0

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Collection[type],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:  # whatever the intercepted torch function returns
        kwargs = kwargs or {}
        name = _WATCHED.get(func)
        if name is not None:
            self._calls += 1
            self._inspect(name, args, kwargs)
        return func(*args, **kwargs)

    def _inspect(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        tensors = args[0] if args else kwargs.get("tensors")
        if len(args) > 1:
            dim = args[1]
        else:
            dim = kwargs.get("dim", kwargs.get("axis", 0))
        if not isinstance(tensors, Sequence) or len(tensors) < 2:
            return
        if not all(isinstance(t, torch.Tensor) for t in tensors):
            return
        nd = tensors[0].dim()
        if nd == 0 or not isinstance(dim, int) or dim not in (-1, nd - 1):
            return
        if not all(t.dim() == nd and t.shape[-1] == self.hidden for t in tensors):
            return
        if len(self.observations) >= self.max_calls:
            self.dropped += 1
            return
        chunks = tuple(t.detach().clone() for t in tensors)
        self.observations.append(
            RawObservation(
                f"{name} call #{self._calls} ({len(chunks)} x {self.hidden})", "concat", chunks, True
            )
        )

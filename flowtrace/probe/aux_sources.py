"""The other two places aux hidden states can be seen: the draft ``fc`` input and the model output.

An engine that packs aux states into a preallocated buffer (``buf[:, i*H:(i+1)*H].copy_(h)``)
never calls ``cat``; what reaches the draft is still visible at its ``fc`` (forward pre-hook), and
engines that return ``(hidden, aux)`` expose it in their output (a list of ``[.., H]`` tensors or a
packed ``[.., k*H]`` tensor).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Any

import torch
from torch import nn

from flowtrace.probe.observed import RawObservation, split_packed


class FcInputHook:
    """Forward pre-hook on the draft ``fc``: its input, split into hidden-size chunks."""

    def __init__(self, fc: nn.Module, name: str, hidden: int) -> None:
        self.fc, self.name, self.hidden = fc, name, hidden
        self.observations: list[RawObservation] = []
        self.problem: str | None = None
        self._handle: torch.utils.hooks.RemovableHandle | None = None

    def __enter__(self) -> "FcInputHook":
        self._handle = self.fc.register_forward_pre_hook(self._hook, with_kwargs=True)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._handle is not None:
            self._handle.remove()

    def _hook(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self.observations:
            return None
        x = args[0] if args else next(iter(kwargs.values()), None)
        if not isinstance(x, torch.Tensor):
            self.problem = f"the input of {self.name} is not a tensor"
            return None
        w = x.shape[-1]
        if w % self.hidden or w // self.hidden < 1:
            self.problem = (
                f"the input of {self.name} is {w} wide, not a multiple of the target hidden "
                f"size {self.hidden}"
            )
            return None
        self.observations.append(
            RawObservation(
                f"input of {self.name} ({w // self.hidden} x {self.hidden})",
                "fc-input",
                split_packed(x, self.hidden),
            )
        )
        return None


def aux_from_output(output: object, hidden: int) -> list[RawObservation]:
    """Aux chunks in a model's return value ``(hidden_or_logits, aux, ...)``.

    Looks at every element after the first: a list/tuple of ``[..., hidden]`` tensors, or one
    tensor of width k*hidden (k >= 2). Mappings (HF ModelOutput) are searched by keys with "aux".
    """
    items: list[tuple[str, object]] = []
    if isinstance(output, Mapping):
        items = [(f"output[{k!r}]", v) for k, v in output.items() if "aux" in str(k).lower()]
    elif isinstance(output, (tuple, list)) and len(output) >= 2:
        items = [(f"output[{i}]", v) for i, v in enumerate(output) if i >= 1]
    found: list[RawObservation] = []
    for where, v in items:
        if isinstance(v, torch.Tensor):
            if v.is_floating_point() and v.dim() >= 1 and v.shape[-1] % hidden == 0 and v.shape[-1] // hidden >= 2:
                k = v.shape[-1] // hidden
                found.append(
                    RawObservation(
                        f"model {where} (packed {k} x {hidden})", "model-output",
                        split_packed(v, hidden), True,
                    )
                )
        elif isinstance(v, (list, tuple)) and v:
            if all(
                isinstance(t, torch.Tensor) and t.is_floating_point() and t.shape[-1] == hidden for t in v
            ):
                found.append(
                    RawObservation(
                        f"model {where} (list of {len(v)} x {hidden})",
                        "model-output",
                        tuple(t.detach().clone() for t in v),
                    )
                )
    return found

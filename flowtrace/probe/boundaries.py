"""Record the residual stream at every boundary of one forward pass, with module hooks.

Boundary b=0 is the embedding output, b=k the output of decoder layer k-1 (= input of layer k) and
b=L the last layer's output before the final norm. Split-residual layers pass ``(hidden,
residual)``; their stream is ``hidden + residual``. Values are cloned inside the hooks because
engines use fused in-place kernels that overwrite the very buffers a hook was handed.

Besides the stream we keep *views* that an engine might feed instead of the stream: the raw
embedding output (when layer 0 sees a scaled embedding), each layer's recorded input, the value
after the final norm, and the halves of a split residual (hidden without residual, residual
alone). Matching against views turns "no match" into a diagnosis.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import torch
from torch import nn

from flowtrace.probe.results import HIDDEN_PART

HIDDEN_NAMES = ("hidden_states", "hidden", "hidden_state", "x", "h", "inputs_embeds")
RESIDUAL_NAMES = ("residual",)
DELTA_NOTE = (
    "the layers return a delta that the loop adds to the residual stream "
    "(input of layer k = input of layer k-1 + its output): b=k is the input of layer k, "
    "b=L the last input plus the last output; the raw outputs are kept as views"
)


@dataclass(frozen=True, slots=True)
class View:
    """A recorded tensor attributed to a boundary.

    ``confirms`` says whether an exact match to this view confirms the boundary (any faithful copy
    of the residual stream does; a half of a split residual does not).
    """

    boundary: int
    label: str
    tensor: torch.Tensor
    confirms: bool


@dataclass(slots=True)
class Tape:
    """The recording of one forward pass: ``streams[b]`` for b in 0..L, plus extra views."""

    num_layers: int
    hidden_size: int
    streams: dict[int, torch.Tensor]
    views: list[View] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def all_views(self) -> list[View]:
        """Primary stream views first (label ``stream``), then the alternatives."""
        prim = [View(b, "stream", t, True) for b, t in sorted(self.streams.items())]
        return prim + self.views


def _split(value: object, hidden: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(hidden, residual) of a layer output/input value, or (None, None) if unrecognisable."""
    if isinstance(value, torch.Tensor):
        return value, None
    if isinstance(value, (tuple, list)) and value and isinstance(value[0], torch.Tensor):
        h = value[0]
        r = value[1] if len(value) > 1 else None
        if isinstance(r, torch.Tensor) and r.shape == h.shape and r.is_floating_point():
            return h, r
        return h, None
    return None, None


class BoundaryRecorder:
    """Context manager that hooks the embedding and each decoder layer; records the first pass.

    Usage::

        with BoundaryRecorder(embed, layers, hidden, final_norm) as rec:
            model(**inputs)
        tape = rec.tape()
    """

    def __init__(
        self,
        embed: nn.Module,
        layers: nn.ModuleList,
        hidden_size: int,
        final_norm: nn.Module | None = None,
        keep_partials: bool = True,
    ) -> None:
        self.embed, self.layers, self.hidden = embed, layers, hidden_size
        self.final_norm = final_norm
        self.keep_partials = keep_partials
        self._handles: list[torch.utils.hooks.RemovableHandle] = []
        self.embed_out: torch.Tensor | None = None
        self.inputs: dict[int, tuple[torch.Tensor, torch.Tensor | None]] = {}
        self.outputs: dict[int, tuple[torch.Tensor, torch.Tensor | None]] = {}
        self.final_norm_out: torch.Tensor | None = None
        self.repeats = 0
        self.unreadable: list[str] = []
        self._sigs: dict[int, inspect.Signature | None] = {}

    # ---------------------------------------------------------------- hooks
    def __enter__(self) -> "BoundaryRecorder":
        self._handles.append(self.embed.register_forward_hook(self._embed_hook))
        for k, layer in enumerate(self.layers):
            self._handles.append(
                layer.register_forward_pre_hook(self._make_pre(k), with_kwargs=True)
            )
            self._handles.append(layer.register_forward_hook(self._make_post(k), with_kwargs=True))
        if self.final_norm is not None:
            self._handles.append(self.final_norm.register_forward_hook(self._norm_hook))
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def _embed_hook(self, module: nn.Module, args: tuple[Any, ...], output: object) -> None:
        if self.embed_out is None and isinstance(output, torch.Tensor):
            self.embed_out = output.detach().clone()

    def _norm_hook(self, module: nn.Module, args: tuple[Any, ...], output: object) -> None:
        if self.final_norm_out is None and len(self.outputs) == len(self.layers):
            h, _ = _split(output, self.hidden)
            if h is not None and h.shape[-1] == self.hidden:
                self.final_norm_out = h.detach().clone()

    def _layer_input(
        self, k: int, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Find the hidden (and residual) argument: by parameter name, else by shape."""
        if k not in self._sigs:
            try:
                self._sigs[k] = inspect.signature(module.forward)
            except (TypeError, ValueError):
                self._sigs[k] = None
        sig = self._sigs[k]
        bound: dict[str, Any] = {}
        if sig is not None:
            try:
                bound = dict(sig.bind_partial(*args, **kwargs).arguments)
            except TypeError:
                bound = {}
        hidden = next(
            (bound[n] for n in HIDDEN_NAMES if isinstance(bound.get(n), torch.Tensor)), None
        )
        has_res_param = any(n in bound or (sig is not None and n in sig.parameters) for n in RESIDUAL_NAMES)
        residual = next(
            (bound[n] for n in RESIDUAL_NAMES if isinstance(bound.get(n), torch.Tensor)), None
        )
        if hidden is None:
            cands = [
                v
                for v in list(args) + list(kwargs.values())
                if isinstance(v, torch.Tensor) and v.is_floating_point() and v.shape[-1] == self.hidden
            ]
            if not cands:
                return None, None
            hidden = cands[0]
            if not has_res_param and len(cands) > 1 and cands[1].shape == hidden.shape:
                residual = cands[1]
        return hidden, residual

    def _make_pre(self, k: int) -> Callable[[nn.Module, tuple[Any, ...], dict[str, Any]], None]:
        def pre(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            if k in self.inputs:
                if k == 0:
                    self.repeats += 1
                return None
            h, r = self._layer_input(k, module, args, kwargs)
            if h is None:
                self.unreadable.append(f"input of layer {k}")
                return None
            self.inputs[k] = (h.detach().clone(), None if r is None else r.detach().clone())
            return None

        return pre

    def _make_post(self, k: int) -> Callable[[nn.Module, tuple[Any, ...], dict[str, Any], object], None]:
        def post(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: object) -> None:
            if k in self.outputs:
                return None
            h, r = _split(output, self.hidden)
            if h is None or h.shape[-1] != self.hidden:
                self.unreadable.append(f"output of layer {k}")
                return None
            self.outputs[k] = (h.detach().clone(), None if r is None else r.detach().clone())
            return None

        return post

    # ---------------------------------------------------------------- result
    @staticmethod
    def _stream(pair: tuple[torch.Tensor, torch.Tensor | None]) -> torch.Tensor:
        h, r = pair
        return h if r is None else h + r

    def _delta_views(self) -> list[View]:
        return [
            View(k + 1, "layer output: a delta, residual not added", h, False)
            for k, (h, _) in sorted(self.outputs.items())
        ]

    def _delta_streams(self, L: int) -> dict[int, torch.Tensor] | None:
        """Streams of a model whose layers return a delta (``residual += layer(residual)``).

        Recognised by value, never by name: every layer's output is one tensor, and each layer's
        input equals the previous input plus the previous output while differing from that
        output. Then b=k is layer k's input and b=L the last input plus the last output.
        """
        if L < 2 or not all(k in self.inputs and k in self.outputs for k in range(L)):
            return None
        if any(r is not None for _, r in self.outputs.values()) or any(
            r is not None for _, r in self.inputs.values()
        ):
            return None
        for k in range(1, L):
            inp, prev, out = self.inputs[k][0], self.inputs[k - 1][0], self.outputs[k - 1][0]
            if inp.shape != prev.shape or inp.shape != out.shape or _same(inp, out):
                return None
            if not torch.allclose(inp.float(), (prev + out).float(), rtol=1e-5, atol=1e-6):
                return None
        streams = {k: self.inputs[k][0] for k in range(1, L)}
        streams[L] = self.inputs[L - 1][0] + self.outputs[L - 1][0]
        return streams

    def tape(self) -> Tape:
        """Assemble streams and views; cross-check output of layer k against input of layer k+1."""
        L = len(self.layers)
        warnings: list[str] = self._capture_warnings()
        streams: dict[int, torch.Tensor] = {}
        views: list[View] = []
        self._boundary_zero(streams, views, warnings)
        delta = self._delta_streams(L)
        for k in range(L):
            if delta is not None and k + 1 in delta:
                streams[k + 1] = delta[k + 1]
            elif k in self.outputs:
                streams[k + 1] = self._stream(self.outputs[k])
            elif k + 1 in self.inputs:
                streams[k + 1] = self._stream(self.inputs[k + 1])
        if delta is not None:
            warnings.append(DELTA_NOTE)
            views += self._delta_views()
        self._cross_check(range(1, L if delta is None else 1), streams, views, warnings)
        if self.final_norm_out is not None and L in streams:
            # not a confirmation of b=L: b=L is defined before the final norm, and training
            # stacks that read HF hidden_states[-1] get the normed value (a real mismatch)
            views.append(View(L, "after the final norm", self.final_norm_out, False))
        if self.keep_partials:
            views += self._partial_views()
        missing = [b for b in range(L + 1) if b not in streams]
        if missing:
            warnings.append(f"no value recorded for boundaries {missing}")
        return Tape(L, self.hidden, streams, views, warnings)

    def _capture_warnings(self) -> list[str]:
        """What went wrong while recording (unreadable hooks, repeated passes), said first
        because it qualifies every stream that follows."""
        warnings: list[str] = []
        if self.unreadable:
            warnings.append(
                "could not read the hidden state at: " + ", ".join(self.unreadable[:5])
                + " (name the modules with --layers-module/--embed-module)"
            )
        if self.repeats:
            warnings.append(
                f"the decoder layers ran {self.repeats + 1} times in one call; "
                "kept the first pass"
            )
        return warnings

    def _boundary_zero(self, streams: dict[int, torch.Tensor], views: list[View], warnings: list[str]) -> None:
        """Set b=0: layer 0's input when recorded (it is what layer 0 reads, e.g. after an
        embedding scale), else the embedding output; a differing embedding output is kept as
        a view so that a layout reading it can still be matched."""
        in0 = self._stream(self.inputs[0]) if 0 in self.inputs else None
        if in0 is not None:
            streams[0] = in0
            if self.embed_out is not None and not _same(self.embed_out, in0):
                views.append(View(0, "embedding output (before the layer-0 input)", self.embed_out, True))
                warnings.append(
                    "the embedding output differs from layer 0's input (scaled embeddings?); "
                    "b=0 uses layer 0's input, the raw embedding output is kept as a view"
                )
        elif self.embed_out is not None:
            streams[0] = self.embed_out

    def _cross_check(
        self, ks: range, streams: dict[int, torch.Tensor], views: list[View], warnings: list[str]
    ) -> None:
        """For each k in ``ks``, compare layer k's input with the stream taken from layer
        k-1's output; a mismatch is warned about and the input kept as a view, since either
        may be what a training stack read."""
        for k in ks:
            if k in self.inputs and k - 1 in self.outputs:
                inp = self._stream(self.inputs[k])
                if not _same(inp, streams[k]):
                    diff = _max_diff(inp, streams[k])
                    warnings.append(
                        f"output of layer {k - 1} != input of layer {k} (max |diff| {diff:.3g}); "
                        f"b={k} uses the output, the input is kept as a view"
                    )
                    views.append(View(k, f"layer {k} input", inp, True))

    def _partial_views(self) -> list[View]:
        """The hidden and residual halves of split layer values, as separate views, for
        stacks that read one half only (asked for with ``keep_partials``)."""
        views: list[View] = []
        for k, (h, r) in sorted(self.outputs.items()):
            if r is not None:
                views.append(View(k + 1, HIDDEN_PART, h, False))
                views.append(View(k + 1, "residual part only (hidden not added)", r, False))
        for k, (h, r) in sorted(self.inputs.items()):
            if r is not None and (k == 0 or k - 1 not in self.outputs):
                views.append(View(k, HIDDEN_PART, h, False))
        return views


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool(torch.equal(a, b))


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        return float("inf")
    return float((a.float() - b.float()).abs().max())

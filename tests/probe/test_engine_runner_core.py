"""The engine-neutral core of `probe engine` (flowtrace/probe/engine_runner.py) on tiny torch stacks.

No engine: each stack below imitates one way an engine hands its layers the residual stream and
hands back what it captured, written so that every boundary is a different tensor. The expected
boundaries follow from the stack's own code (the comment at each), not from the core's output.
"""

from __future__ import annotations

import importlib
import sys

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from flowtrace.probe import engine_runner as core  # noqa: E402
from flowtrace.probe.engine import compare, same_raise  # noqa: E402

H, T = 8, 5


class Batch:
    """Per-forward state that owns the residual, as a batch's stage state does."""

    def __init__(self) -> None:
        self.residual = None


class SideLayer(nn.Module):
    """Returns only its delta; the running residual lives in ``forward_batch.residual``."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(H, H)

    def forward(self, hidden_states, forward_batch, capture=None):
        stream = hidden_states if forward_batch.residual is None else hidden_states + forward_batch.residual
        if capture is not None:
            capture(stream.clone())  # the layer's input stream: boundary = the layer's index
        forward_batch.residual = stream
        return torch.tanh(self.proj(stream))


class SideStack(nn.Module):
    def __init__(self, packed: bool = False, deltas: bool = False) -> None:
        super().__init__()
        self.layers = nn.ModuleList(SideLayer() for _ in range(4))
        self.capture, self.packed, self.deltas = [], packed, deltas

    def forward(self, x, batch):
        aux, h = [], x
        for i, layer in enumerate(self.layers):
            if self.deltas and i in self.capture:
                aux.append(h.clone())  # what the previous layer returned (i > 0): its delta, not the stream
            h = layer(h, batch, capture=aux.append if (i in self.capture and not self.deltas) else None)
        out = h + batch.residual
        return out, (torch.cat(aux, -1) if self.packed else aux)


def _side_stream(args, out):
    batch = args["forward_batch"]
    value = args["hidden_states"] if out is None else out
    return value if batch.residual is None else value + batch.residual


def _observe(stack, indices):
    torch.manual_seed(0)
    core.record_stack(stack, stack.layers, _side_stream)
    stack.capture = indices
    with torch.no_grad():
        stack(torch.randn(T, H), Batch())
    return core.observe()


def test_a_stream_reader_names_the_boundaries_of_layers_that_keep_the_residual_aside():
    seen = _observe(SideStack(), [1, 3])  # inputs of layers 1 and 3: boundaries 1 and 3
    assert seen["outcome"] == "captures" and [s["boundary"] for s in seen["slots"]] == [1, 3]
    assert seen["num_boundaries"] == 5  # 0..L


def test_a_packed_tensor_is_cut_into_states_of_the_streams_width():
    seen = _observe(SideStack(packed=True), [0, 2])  # one [T, 2H] tensor: inputs of layers 0 and 2
    assert [s["boundary"] for s in seen["slots"]] == [0, 2] and all(s["width"] == H for s in seen["slots"])


def test_a_state_that_is_a_layers_own_output_is_named_as_such():
    # index 2 records what layer 1 returned (its delta), index 3 what layer 2 returned
    seen = _observe(SideStack(deltas=True), [2, 3])
    assert seen["outcome"] == "captures" and [s["boundary"] for s in seen["slots"]] == [None, None]
    assert [s["layer_value_of"] for s in seen["slots"]] == [1, 2]


def test_the_raise_lists_every_frame_inside_the_package(tmp_path, monkeypatch):
    pkg = tmp_path / "quill"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "m.py").write_text(
        "def check(n):\n"
        "    if n != 3:\n"
        "        raise RuntimeError('captured 2 of 3')\n\n\n"
        "def finalize(n):\n"
        "    return check(n)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    m = importlib.import_module("quill.m")
    try:
        with pytest.raises(RuntimeError) as info:
            m.finalize(2)
        err = core._engine_error(info.value, "quill")
    finally:
        sys.modules.pop("quill.m", None)
        sys.modules.pop("quill", None)
    assert err["raised_at"] == "quill/m.py:3"  # innermost: the check's raise
    assert err["raised_through"] == ["quill/m.py:3", "quill/m.py:7"]  # then its caller
    assert err["message"] == "RuntimeError: captured 2 of 3"


class _RaisingScript:
    """A runner script whose engine raises while generating, after the target captured two states."""

    @staticmethod
    def set_ids(engine, mode, ids, key):
        return 4

    @staticmethod
    def generate(engine, prompt, tokens):
        raise RuntimeError("fc expects 3 states")

    @staticmethod
    def observe(engine):
        return {"forwards": 1, "num_boundaries": 5, "outcome": "captures", "slots": [{"boundary": 2}],
                "reason": "", "fc_input": {"width": 16, "slots": [], "calls": 1}}


def test_a_case_that_raises_keeps_the_error_and_what_was_captured_without_the_verdict():
    case = {"name": "c", "mode": "direct", "ids": [1, 3], "key": None, "fc_slots": 3, "draft_layers": 1}
    spec = {"probe": {"package": "quill"}}
    rec, raised = core._run_case(_RaisingScript(), None, case, None, spec)
    assert raised
    del rec["seconds"]
    # the error's four fields as _engine_error makes them (no frame inside `quill`), then the observation
    # less its outcome and reason: the case raised, so "captures" is not its verdict
    expected = {
        "name": "c", "mode": "direct", "ids": [1, 3], "fc_slots": 3, "plumbing": "rerun", "engine_layers": 4,
        "outcome": "raises", "raised_at": None, "raised_through": [], "message": "RuntimeError: fc expects 3 states",
        "forwards": 1, "num_boundaries": 5, "slots": [{"boundary": 2}],
        "fc_input": {"width": 16, "slots": [], "calls": 1},
    }
    assert rec == expected and list(rec) == list(expected)  # the record's JSON keeps this order


def test_a_raise_agrees_only_where_the_static_trace_says_it_raises():
    static = {"outcome": "raises", "raises_at": "quill/m.py:7", "boundaries": None}
    through = {"outcome": "raises", "raised_at": "quill/m.py:3", "raised_through": ["quill/m.py:3", "quill/m.py:7"]}
    elsewhere = {"outcome": "raises", "raised_at": "quill/backend.py:9", "raised_through": ["quill/backend.py:9"]}
    assert same_raise(through, static) and compare({}, through, static)[0]
    assert not same_raise(elsewhere, static) and not compare({}, elsewhere, static)[0]
    # no place on one side: the outcomes alone decide
    assert same_raise({"outcome": "raises"}, static) and same_raise(elsewhere, {"outcome": "raises", "raises_at": None})

"""Draft checkpoints read from hand-written safetensors headers (no torch), and hostile files.

Each header here is built byte by byte: 8-byte little-endian length, JSON, then the data
section the offsets point into. Expected shapes come from the headers written here.
"""

from __future__ import annotations

import json
import os
import struct

import pytest

from flowtrace.sources.checkpoint import CheckpointError, read_draft_checkpoint, read_header


def tensors(specs: dict[str, tuple[str, list[int]]]) -> dict:
    """A header dict with consecutive data_offsets (2 bytes per element: BF16)."""
    header, offset = {}, 0
    for name, (dtype, shape) in specs.items():
        size = 2
        for dim in shape:
            size *= dim
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    return header


def write_safetensors(path, header: dict, data_bytes: int | None = None) -> None:
    raw = json.dumps(header).encode()
    if data_bytes is None:
        data_bytes = max((e["data_offsets"][1] for k, e in header.items() if k != "__metadata__"), default=0)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * data_bytes)


# Small stand-ins for a SpecForge EAGLE-3 draft: target hidden 16, three aux states -> fc 48 -> 16.
EAGLE3 = {
    "fc.weight": ("BF16", [16, 48]),
    "midlayer.self_attn.q_proj.weight": ("BF16", [16, 32]),
    "midlayer.hidden_norm.weight": ("BF16", [16]),
    "d2t": ("I64", [8]),
    "t2d": ("BOOL", [8]),
}


def test_single_file_fc_shape_and_namings(tmp_path):
    write_safetensors(tmp_path / "model.safetensors", tensors(EAGLE3))
    ckpt = read_draft_checkpoint(tmp_path)
    assert ckpt.fc_name == "fc.weight"
    assert ckpt.fc_in_features == 48 and ckpt.fc_out_features == 16
    assert ckpt.slots(16) == 3
    assert ckpt.slots(20) is None  # 48 is not a multiple of 20
    assert set(ckpt.namings) == {"fc.weight", "midlayer.*", "d2t", "t2d"}


def test_layers_0_naming_with_prefix_and_fc_norm(tmp_path):
    specs = {
        "model.fc.weight": ("F16", [16, 32]),
        "model.layers.0.mlp.fc1.weight": ("F16", [4, 4]),
        "model.fc_norm.weight": ("F16", [32]),
    }
    write_safetensors(tmp_path / "model.safetensors", tensors(specs))
    ckpt = read_draft_checkpoint(tmp_path)
    assert ckpt.fc_name == "model.fc.weight"  # not the MLP's fc1
    assert ckpt.slots(16) == 2
    assert set(ckpt.namings) == {"fc.weight", "layers.0.*", "fc_norm"}


def test_sharded_index_reads_the_shard_holding_fc(tmp_path):
    write_safetensors(
        tmp_path / "model-00001-of-00002.safetensors", tensors({"midlayer.input_layernorm.weight": ("BF16", [16])})
    )
    write_safetensors(tmp_path / "model-00002-of-00002.safetensors", tensors({"fc.weight": ("BF16", [16, 64])}))
    index = {
        "metadata": {},
        "weight_map": {
            "midlayer.input_layernorm.weight": "model-00001-of-00002.safetensors",
            "fc.weight": "model-00002-of-00002.safetensors",
        },
    }
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    ckpt = read_draft_checkpoint(tmp_path)
    assert ckpt.file.endswith("model-00002-of-00002.safetensors")
    assert ckpt.slots(16) == 4


def test_folder_without_weights_is_not_an_error(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert read_draft_checkpoint(tmp_path) is None


def test_checkpoint_without_fc(tmp_path):
    write_safetensors(tmp_path / "model.safetensors", tensors({"lm_head.weight": ("BF16", [8, 16])}))
    ckpt = read_draft_checkpoint(tmp_path)
    assert ckpt.fc_name is None and ckpt.fc_in_features is None and ckpt.slots(16) is None


# -- hostile files: one CheckpointError each -------------------------------------------
def expect_error(tmp_path, fragment: str) -> str:
    with pytest.raises(CheckpointError) as info:
        read_draft_checkpoint(tmp_path)
    message = str(info.value)
    assert "\n" not in message and fragment in message, message
    return message


def test_absurd_header_length(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", 2**63) + b"{}")
    expect_error(tmp_path, "absurd")


def test_header_length_beyond_the_file(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", 1000) + b"{}")
    expect_error(tmp_path, "truncated")


def test_file_shorter_than_the_length_field(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"\x01\x02")
    expect_error(tmp_path, "truncated")


def test_data_section_cut_off(tmp_path):
    write_safetensors(tmp_path / "model.safetensors", tensors(EAGLE3), data_bytes=10)
    expect_error(tmp_path, "truncated")


def test_header_not_json(tmp_path):
    raw = b"{not json at all"
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw)
    expect_error(tmp_path, "not valid JSON")


def test_header_binary_garbage(tmp_path):
    raw = b"\xff\xfe\x00garbage"
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw)
    expect_error(tmp_path, "not UTF-8")


@pytest.mark.parametrize("depth", [40, 200_000])
def test_deeply_nested_header(tmp_path, depth):
    raw = ('{"fc.weight": ' + "[" * depth + "]" * depth + "}").encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw)
    expect_error(tmp_path, "nests deeper")


def test_entry_with_bad_shape(tmp_path):
    write_safetensors(
        tmp_path / "model.safetensors", {"fc.weight": {"dtype": "BF16", "shape": [-1, "x"], "data_offsets": [0, 0]}}
    )
    expect_error(tmp_path, "valid dtype, shape")


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_symlink_to_a_device(tmp_path):
    os.symlink("/dev/zero", tmp_path / "model.safetensors")
    expect_error(tmp_path, "not a regular file")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_never_blocks(tmp_path):
    os.mkfifo(tmp_path / "model.safetensors")
    expect_error(tmp_path, "not a regular file")


def test_huge_sparse_file_reads_only_the_header(tmp_path):
    header = json.dumps(tensors({"fc.weight": ("BF16", [16, 48])})).encode()
    path = tmp_path / "model.safetensors"
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(header)) + header)
        fh.truncate(64 * 1024**3)  # 64 GiB, sparse: reading it would take minutes
    assert read_draft_checkpoint(tmp_path).fc_in_features == 48


def test_index_with_path_traversal(tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"fc.weight": "../../etc/passwd"}})
    )
    expect_error(tmp_path, "not a plain file name")


def test_index_not_json(tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text("[1, 2")
    expect_error(tmp_path, "index")


def test_index_names_a_tensor_the_shard_lacks(tmp_path):
    write_safetensors(tmp_path / "a.safetensors", tensors({"other": ("BF16", [2])}))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"fc.weight": "a.safetensors"}}))
    expect_error(tmp_path, "does not declare")


def test_read_header_metadata_is_skipped(tmp_path):
    header = tensors({"fc.weight": ("BF16", [4, 8])})
    header["__metadata__"] = {"format": "pt"}
    write_safetensors(tmp_path / "x.safetensors", header)
    assert [t.name for t in read_header(tmp_path / "x.safetensors")] == ["fc.weight"]

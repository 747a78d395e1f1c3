"""Read an EAGLE-3 draft checkpoint's tensor names and shapes from its safetensors header(s).

The draft's ``fc`` weight is the one fact no config states reliably: its ``in_features`` is
(number of auxiliary states) x (target hidden size), and it is what the engine's concatenation
must fill. A safetensors file starts with an 8-byte little-endian header length and a JSON
header, so the shape is readable with the standard library alone: no torch, nothing loaded,
no tensor data touched.

Draft directories are untrusted input. Every limit here exists so that a hostile or broken file
gives one :class:`CheckpointError` line instead of a hang, a huge allocation or a traceback:
only regular files are opened (a symlink to a device or FIFO is refused before ``open``, and
the descriptor is opened non-blocking and re-checked), the header length is capped and checked
against the file size, the header must be a flat JSON object of tensor entries, and nesting
beyond the safetensors format's own depth is rejected before or while parsing.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from typing import Any, Callable, TypeGuard
from pathlib import Path

from flowtrace.errors import UsageError

MAX_HEADER_BYTES = 100 * 1024 * 1024  # the limit the safetensors format itself enforces
MAX_INDEX_BYTES = 64 * 1024 * 1024
MAX_NESTING = 16  # a safetensors header is at most 3 deep ({name: {"shape": [..]}})
MAX_SHAPE_RANK = 8

# The Hugging Face file names a saved checkpoint uses (single file, then sharded index).
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


class CheckpointError(UsageError):
    """A draft checkpoint that cannot be read safely: one line naming the file (exit 2)."""


@dataclass(frozen=True, slots=True)
class Tensor:
    name: str
    dtype: str
    shape: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class DraftCheckpoint:
    """What the header says about the draft: the fc projection and the EAGLE-3 namings seen."""

    directory: str
    file: str  # the file holding the fc weight (or the only file read)
    files: tuple[str, ...]  # every safetensors file whose header was read
    tensor_count: int
    fc_name: str | None
    fc_shape: tuple[int, ...] | None
    namings: tuple[str, ...]  # recognised EAGLE-3 namings, e.g. "midlayer.*", "d2t"

    @property
    def fc_in_features(self) -> int | None:
        return self.fc_shape[1] if self.fc_shape and len(self.fc_shape) == 2 else None

    @property
    def fc_out_features(self) -> int | None:
        return self.fc_shape[0] if self.fc_shape and len(self.fc_shape) == 2 else None

    def slots(self, target_hidden: int | None) -> int | None:
        """How many target states the fc concatenates, when the width divides evenly."""
        width = self.fc_in_features
        if width is None or not target_hidden or width % target_hidden:
            return None
        return width // target_hidden


# -- safe file access -------------------------------------------------------------------
def _open_regular(path: Path) -> tuple[int, int]:
    """(fd, size) of a regular file; refuses devices, FIFOs, sockets and folders, also
    behind symlinks, before opening (so a FIFO cannot block the open)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: not found") from None
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(info.st_mode):
        raise CheckpointError(
            f"{path}: not a regular file (a device, FIFO, socket or folder, possibly behind a symlink); refusing to"
            " read it"
        )
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot open ({exc.strerror or exc})") from None
    opened = os.fstat(fd)
    if not stat.S_ISREG(opened.st_mode):  # swapped between stat and open
        os.close(fd)
        raise CheckpointError(f"{path}: not a regular file; refusing to read it")
    return fd, opened.st_size


def _read_exact(fd: int, count: int, path: Path, what: str) -> bytes:
    chunks: list[bytes] = []
    left = count
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise CheckpointError(
                f"{path}: truncated: the file ends inside the {what} ({count - left} of {count} bytes)"
            )
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def _nesting_exceeds(text: str, limit: int) -> bool:
    """True when brackets nest deeper than ``limit`` outside strings.

    Checked before json.loads, at C speed: strings are cut out, everything but brackets
    dropped, then innermost pairs removed ``limit`` times; anything left nests deeper
    (or is unbalanced, which json.loads would reject anyway)."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    for _ in range(limit):
        if not brackets:
            return False
        shorter = brackets.replace("[]", "").replace("{}", "")
        if shorter == brackets:  # unbalanced: json.loads reports it
            return False
        brackets = shorter
    return bool(brackets)


def _load_json(raw: bytes, path: Path, what: str) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise CheckpointError(f"{path}: the {what} is not UTF-8 text (not a safetensors file?)") from None
    if not text.lstrip().startswith("{"):
        raise CheckpointError(f"{path}: the {what} is not a JSON object (not a safetensors file?)")
    if _nesting_exceeds(text, MAX_NESTING):
        raise CheckpointError(f"{path}: the {what} nests deeper than {MAX_NESTING} levels; refusing it")
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        detail = f"line {exc.lineno}: {exc.msg}" if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
        raise CheckpointError(f"{path}: the {what} is not valid JSON ({detail})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: the {what} is not a JSON object")
    return data


def read_regular_file(path: str | Path, limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (config files of a draft or
    target folder): a symlink to /dev/zero or a FIFO must not hang the reader."""
    p = Path(path)
    fd, size = _open_regular(p)
    try:
        if size > limit:
            raise CheckpointError(f"{p}: {size} bytes is too large (limit {limit})")
        return _read_exact(fd, size, p, "file")
    finally:
        os.close(fd)


# -- safetensors header ------------------------------------------------------------------
def _counts(value: object, length: int | None = None) -> TypeGuard[list[int]]:
    """A JSON list of non-negative integers (of ``length`` items when given): a shape or offsets."""
    return (
        isinstance(value, list)
        and (length is None or len(value) == length)
        and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in value)
    )


def _tensor(name: object, entry: object, path: Path, data_size: int) -> Tensor:
    if not isinstance(name, str) or not isinstance(entry, dict):
        raise CheckpointError(f"{path}: header entry {str(name)[:60]!r} is not a tensor description")
    shape, dtype, offsets = entry.get("shape"), entry.get("dtype"), entry.get("data_offsets")
    if not isinstance(dtype, str) or not _counts(shape) or len(shape) > MAX_SHAPE_RANK or not _counts(offsets, 2):
        raise CheckpointError(f"{path}: header entry {name[:60]!r} lacks a valid dtype, shape or data_offsets")
    assert isinstance(shape, list) and isinstance(offsets, list)  # ints() checked both; tells the type checker
    if offsets[1] < offsets[0] or offsets[1] > data_size:
        raise CheckpointError(
            f"{path}: truncated: tensor {name[:60]!r} ends at byte {offsets[1]} of a {data_size}-byte data section"
        )
    return Tensor(name, dtype, tuple(shape))


def read_header(path: str | Path) -> tuple[Tensor, ...]:
    """The tensors a safetensors file declares (names, dtypes, shapes); reads only the header."""
    p = Path(path)
    fd, size = _open_regular(p)
    try:
        if size < 8:
            raise CheckpointError(f"{p}: truncated: {size} bytes, shorter than the 8-byte safetensors header length")
        length = int.from_bytes(_read_exact(fd, 8, p, "header length"), "little")
        if length > MAX_HEADER_BYTES:
            raise CheckpointError(
                f"{p}: header length {length} bytes is absurd (limit {MAX_HEADER_BYTES}); not a safetensors file?"
            )
        if length > size - 8:
            raise CheckpointError(f"{p}: truncated: header length {length} bytes but only {size - 8} bytes follow")
        header = _load_json(_read_exact(fd, length, p, "header"), p, "safetensors header")
    finally:
        os.close(fd)
    data_size = size - 8 - length
    return tuple(_tensor(name, entry, p, data_size) for name, entry in header.items() if name != "__metadata__")


def _shard_names(directory: Path) -> tuple[Path, dict[str, str]]:
    index = directory / INDEX_FILE
    fd, size = _open_regular(index)
    try:
        if size > MAX_INDEX_BYTES:
            raise CheckpointError(f"{index}: {size} bytes is too large for a shard index (limit {MAX_INDEX_BYTES})")
        data = _load_json(_read_exact(fd, size, index, "index"), index, "shard index")
    finally:
        os.close(fd)
    weight_map = data.get("weight_map")
    if not isinstance(weight_map, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()
    ):
        raise CheckpointError(f"{index}: no 'weight_map' of tensor name -> shard file")
    for shard in set(weight_map.values()):
        if Path(shard).name != shard or shard in ("", ".", ".."):
            raise CheckpointError(f"{index}: shard {shard[:80]!r} is not a plain file name in {directory}")
    return index, weight_map


# -- EAGLE-3 namings ---------------------------------------------------------------------
def is_fc_weight(name: str) -> bool:
    """The draft's input projection: ``fc.weight`` (possibly under a ``model.`` prefix),
    not an MLP's ``...mlp.fc1.weight``."""
    parts = name.split(".")
    return len(parts) >= 2 and parts[-2:] == ["fc", "weight"] and "mlp" not in parts


def namings(names: list[str]) -> tuple[str, ...]:
    """Which EAGLE-3 checkpoint conventions the tensor names follow."""
    found = []
    probes: tuple[tuple[str, Callable[[str], bool]], ...] = (
        ("fc.weight", lambda n: is_fc_weight(n)),
        ("midlayer.*", lambda n: n.startswith("midlayer.") or ".midlayer." in n),
        ("layers.0.*", lambda n: n.startswith("layers.0.") or ".layers.0." in n),
        ("fc_norm", lambda n: "fc_norm" in n.split(".")),
        ("d2t", lambda n: n.split(".")[-1] == "d2t"),
        ("t2d", lambda n: n.split(".")[-1] == "t2d"),
    )
    for label, probe in probes:
        if any(probe(n) for n in names):
            found.append(label)
    return tuple(found)


def _pick_fc(tensors: list[Tensor]) -> Tensor | None:
    fcs = sorted((t for t in tensors if is_fc_weight(t.name)), key=lambda t: (len(t.name), t.name))
    return fcs[0] if fcs else None


def read_draft_checkpoint(directory: str | Path) -> DraftCheckpoint | None:
    """The draft's fc shape and namings; None when the folder has no safetensors weights."""
    d = Path(directory)
    if (d / INDEX_FILE).exists() or (d / INDEX_FILE).is_symlink():
        index, weight_map = _shard_names(d)
        fc_names = sorted((n for n in weight_map if is_fc_weight(n)), key=lambda n: (len(n), n))
        shard = (
            d / weight_map[fc_names[0]] if fc_names else d / sorted(set(weight_map.values()))[0] if weight_map else None
        )
        if shard is None:
            raise CheckpointError(f"{index}: the weight_map is empty")
        tensors = list(read_header(shard))
        fc = next((t for t in tensors if fc_names and t.name == fc_names[0]), None)
        if fc_names and fc is None:
            raise CheckpointError(
                f"{shard}: the index says {fc_names[0]!r} is here, but the header does not declare it"
            )
        return DraftCheckpoint(
            str(d),
            str(shard),
            (str(shard),),
            len(weight_map),
            fc.name if fc else None,
            fc.shape if fc else None,
            namings(list(weight_map)),
        )
    single = d / SINGLE_FILE
    if not single.exists() and not single.is_symlink():
        candidates = sorted(p for p in d.glob("*.safetensors"))
        if len(candidates) != 1:
            return None
        single = candidates[0]
    tensors = list(read_header(single))
    fc = _pick_fc(tensors)
    return DraftCheckpoint(
        str(d),
        str(single),
        (str(single),),
        len(tensors),
        fc.name if fc else None,
        fc.shape if fc else None,
        namings([t.name for t in tensors]),
    )


def checkpoint_json(ckpt: DraftCheckpoint, target_hidden: int | None) -> dict[str, Any]:
    return {
        "file": ckpt.file,
        "fc_name": ckpt.fc_name,
        "fc_shape": list(ckpt.fc_shape) if ckpt.fc_shape is not None else None,
        "fc_in_features": ckpt.fc_in_features,
        "fc_out_features": ckpt.fc_out_features,
        "slots": ckpt.slots(target_hidden),
        "target_hidden_size": target_hidden,
        "tensors": ckpt.tensor_count,
        "namings": list(ckpt.namings),
    }

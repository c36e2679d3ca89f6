"""Validate a safetensors file's header before any library opens the file.

Input: a ``*.safetensors`` path. Output: the tensors it declares (name -> dtype,
shape, byte range), or an ``InputError`` naming the file and the field.

The format: 8 bytes of little-endian header length N, N bytes of a UTF-8 JSON
object, then the data. Checked here, in this order, so a lying header (a length
of 2^63, a length past the end of the file, offsets past the end, a file cut
after its header, overlapping or gapped tensors, a shape whose size is not its
byte range) is refused with its name rather than reaching the safetensors,
torch, vLLM or MLX loaders as a raw ``SafetensorError`` or a crash:

- the file holds at least 8 bytes, and N is at most ``MAX_HEADER`` (100 MB, the
  safetensors library's own limit) and at most the bytes after the 8;
- the header is UTF-8 JSON (``guardrepro.limits``: nesting limit, no lone
  surrogates), an object whose ``__metadata__`` (optional) maps strings to
  strings and whose every other key is a tensor ``{dtype, shape, data_offsets}``;
- each dtype is known, each shape a list of non-negative integers, each
  ``data_offsets`` ``[begin, end]`` with ``end - begin`` equal to the shape's
  element count times the dtype's size;
- the tensors tile the data exactly: sorted by ``begin`` they start at 0, each
  begins where the previous ended, and the last ends at the end of the file.

Reads the 8 bytes and the header only (never the data).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guardrepro.errors import InputError
from guardrepro.limits import load_json

MAX_HEADER = 100 * 1000 * 1000
DTYPE_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "F4": 1,
    "F6_E2M3": 1, "F6_E3M2": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8, "C64": 8,
}  # fmt: skip
_SUB_BYTE = {"F4": 0.5, "F6_E2M3": 0.75, "F6_E3M2": 0.75}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _tensor(name: str, entry: Any, data_size: int, file: str) -> TensorInfo:
    def bad(problem: str, field: str = "") -> InputError:
        where = f"{name}.{field}" if field else name
        return InputError(f"safetensors header: {problem}", file=file, field=where)

    if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
        raise bad("a tensor entry must be an object with exactly dtype, shape, data_offsets")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if dtype not in DTYPE_BYTES:
        raise bad(f"unknown dtype {dtype!r}", "dtype")
    if not isinstance(shape, list) or not all(_count(d) for d in shape):
        raise bad(f"shape must be a list of non-negative integers, got {shape!r}", "shape")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_count(o) for o in offsets)
            and offsets[0] <= offsets[1]):
        raise bad(f"data_offsets must be [begin, end] with 0 <= begin <= end, got {offsets!r}",
                  "data_offsets")
    begin, end = offsets
    if end > data_size:
        raise bad(f"data_offsets {offsets} run past the end of the data ({data_size} bytes"
                  " after the header)", "data_offsets")
    elements = math.prod(shape)
    need = elements * _SUB_BYTE.get(dtype, DTYPE_BYTES[dtype])
    if need != end - begin:
        raise bad(f"shape {shape} of {dtype} needs {need:g} bytes, data_offsets give"
                  f" {end - begin}", "data_offsets")
    return TensorInfo(name, dtype, tuple(shape), begin, end)


def _read_header(path: Path, file: str) -> tuple[bytes, int]:
    """(header bytes, data size); InputError when the length cannot be right."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise InputError(f"safetensors file of {size} bytes: too short for the 8-byte"
                                 " header length", file=file)
            (length,) = struct.unpack("<Q", head)
            if length > MAX_HEADER:
                raise InputError(f"safetensors header length {length} exceeds the limit of"
                                 f" {MAX_HEADER} bytes", file=file)
            if length > size - 8:
                raise InputError(f"safetensors header length {length} is larger than the"
                                 f" {size - 8} bytes after it (file cut short or corrupt)",
                                 file=file)
            raw = fh.read(length)
    except OSError as exc:
        raise InputError(f"cannot read safetensors file: {exc}", file=file) from None
    return raw, size - 8 - length


def check_safetensors(path: str | Path) -> list[TensorInfo]:
    """The tensors ``path`` declares, after checking its header against its size."""
    path = Path(path)
    file = str(path)
    raw, data_size = _read_header(path, file)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"safetensors header is not UTF-8: {exc}", file=file) from None
    header = load_json(text, file=file, what="safetensors header JSON")
    if not isinstance(header, dict):
        raise InputError("safetensors header must be a JSON object", file=file)
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in meta.items()
    ):
        raise InputError("safetensors header: __metadata__ must map strings to strings",
                         file=file, field="__metadata__")
    tensors = sorted((_tensor(name, entry, data_size, file) for name, entry in header.items()),
                     key=lambda t: (t.begin, t.end))
    at = 0
    for t in tensors:
        if t.begin != at:
            what = "overlaps the tensor before it" if t.begin < at else f"leaves a gap at {at}"
            raise InputError(f"safetensors header: tensor data {what}", file=file,
                             field=f"{t.name}.data_offsets")
        at = t.end
    if at != data_size:
        raise InputError(f"safetensors header: the tensors cover {at} bytes, the file holds"
                         f" {data_size} after the header", file=file)
    return tensors

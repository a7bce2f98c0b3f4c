"""A minimal GGUF (v3) key-value reader and writer that copies big arrays as raw bytes.

The `gguf` package's reader and writer handle a vocabulary one Python object per string:
minutes for a 262k-token vocabulary with its merges on this machine. Copying the encoded
arrays as bytes takes milliseconds, and the family models need nothing else from them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["RawValue", "read_kv", "write_gguf", "scalar", "string_array", "number_array"]

UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
_SCALAR = {UINT8: "<B", INT8: "<b", UINT16: "<H", INT16: "<h", UINT32: "<I", INT32: "<i", FLOAT32: "<f",
           BOOL: "<?", UINT64: "<Q", INT64: "<q", FLOAT64: "<d"}  # fmt: skip
_ALIGN = 32
_TENSOR_TYPES = {np.dtype(np.float32): 0, np.dtype(np.float16): 1}


@dataclass(frozen=True)
class RawValue:
    """One value as GGUF encodes it: its type, and its bytes after the type field (for an
    array: element type, count, elements)."""

    type: int
    data: bytes

    @property
    def count(self) -> int:
        assert self.type == ARRAY
        return int(struct.unpack_from("<Q", self.data, 4)[0])

    @property
    def item_type(self) -> int:
        assert self.type == ARRAY
        return int(struct.unpack_from("<I", self.data, 0)[0])

    def scalar(self) -> int | float | bool | str:
        if self.type == STRING:
            return self.data[8:].decode("utf-8")
        return struct.unpack(_SCALAR[self.type], self.data)[0]  # type: ignore[no-any-return]

    def strings(self) -> list[str]:
        """The elements of an array of strings."""
        out, pos, data = [], 12, self.data
        for _ in range(self.count):
            (n,) = struct.unpack_from("<Q", data, pos)
            out.append(data[pos + 8 : pos + 8 + n].decode("utf-8", errors="replace"))
            pos += 8 + n
        return out


def _skip(data: bytes, pos: int, vtype: int) -> int:
    if vtype == STRING:
        return pos + 8 + int(struct.unpack_from("<Q", data, pos)[0])
    if vtype == ARRAY:
        item, count = struct.unpack_from("<IQ", data, pos)
        pos += 12
        if item == STRING:
            for _ in range(count):
                pos += 8 + int(struct.unpack_from("<Q", data, pos)[0])
            return pos
        if item == ARRAY:
            for _ in range(count):
                pos = _skip(data, pos, ARRAY)
            return pos
        return pos + count * struct.calcsize(_SCALAR[item])
    return pos + struct.calcsize(_SCALAR[vtype])


def read_kv(path: str | Path) -> dict[str, RawValue]:
    """The key-value section of a GGUF file."""
    data = Path(path).read_bytes()
    magic, version, _, n_kv = struct.unpack_from("<IIQQ", data, 0)
    if magic != 0x46554747 or version != 3:
        raise ValueError(f"{path}: not a GGUF v3 file")
    pos, out = 24, {}
    for _ in range(n_kv):
        (n,) = struct.unpack_from("<Q", data, pos)
        key = data[pos + 8 : pos + 8 + n].decode()
        (vtype,) = struct.unpack_from("<I", data, pos + 8 + n)
        start = pos + 12 + n
        pos = _skip(data, start, vtype)
        out[key] = RawValue(vtype, data[start:pos])
    return out


def _string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return struct.pack("<Q", len(raw)) + raw


def scalar(vtype: int, value: int | float | bool | str) -> RawValue:
    if vtype == STRING:
        assert isinstance(value, str)
        return RawValue(STRING, _string(value))
    return RawValue(vtype, struct.pack(_SCALAR[vtype], value))


def string_array(items: list[str], *, prefix: RawValue | None = None) -> RawValue:
    """An array of strings: `prefix`'s elements (raw, when given) followed by `items`."""
    count = len(items) + (prefix.count if prefix is not None else 0)
    head = struct.pack("<IQ", STRING, count)
    body = prefix.data[12:] if prefix is not None else b""
    return RawValue(ARRAY, head + body + b"".join(_string(t) for t in items))


def number_array(vtype: int, values: list[int] | list[float], *, prefix: RawValue | None = None) -> RawValue:
    count = len(values) + (prefix.count if prefix is not None else 0)
    body = prefix.data[12:] if prefix is not None else b""
    return RawValue(
        ARRAY,
        struct.pack("<IQ", vtype, count) + body + struct.pack(f"<{len(values)}{_SCALAR[vtype][1]}", *values),
    )


def write_gguf(path: str | Path, kv: dict[str, RawValue], tensors: dict[str, np.ndarray]) -> Path:
    """Write a GGUF v3 file: `kv` in order, then `tensors` (f32 or f16 numpy arrays, shape
    (rows, cols) as llama.cpp's (ne1, ne0))."""
    path = Path(path)
    infos, offset = [], 0
    for name, array in tensors.items():
        dims = list(reversed(array.shape))
        info = _string(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        infos.append(info + struct.pack("<IQ", _TENSOR_TYPES[array.dtype], offset))
        offset += -(-array.nbytes // _ALIGN) * _ALIGN
    with open(path, "wb") as f:
        f.write(struct.pack("<IIQQ", 0x46554747, 3, len(tensors), len(kv)))
        for key, value in kv.items():
            f.write(_string(key) + struct.pack("<I", value.type) + value.data)
        for info in infos:
            f.write(info)
        f.write(b"\0" * (-f.tell() % _ALIGN))
        for array in tensors.values():
            f.write(np.ascontiguousarray(array).tobytes())
            f.write(b"\0" * (-array.nbytes % _ALIGN))
    return path

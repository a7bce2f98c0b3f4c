"""The one GGUF header reader: typed metadata read from the file without loading the
model (a model's sampling defaults; /api/tags and /api/show, which describe models that
need not be loaded).

llama.cpp's metadata API gives every value as a string; Ollama's `model_info` keeps
numbers as numbers, so the header is parsed here: a few hundred reads, no tensor data.
Long arrays (the vocabulary) are skipped unless asked for: decoding a 262k vocabulary
takes seconds. A length field larger than the file is an error, never an allocation.
"""

from __future__ import annotations

import struct
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

__all__ = ["GgufHeader", "HeaderCache", "read_header"]

_SCALARS: dict[int, str] = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
                            10: "<Q", 11: "<q", 12: "<d"}  # fmt: skip
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class GgufHeader:
    """`metadata`: every key/value, arrays longer than the reader's limit given as []
    (Ollama's non-verbose /api/show does the same for vocabularies). `n_params`: the
    sum of all tensors' element counts. `weight_types`: the ggml type ids of the tensors
    with two dimensions or more (the weight matrices)."""

    metadata: dict[str, Any]
    n_params: int
    weight_types: frozenset[int] = frozenset()


class _Reader:
    def __init__(self, f: BinaryIO, size: int) -> None:
        self.f = f
        self.size = size

    def length(self) -> int:
        """A string's or array's length, which cannot exceed the file's size."""
        n = int(self.unpack("<Q"))
        if n > self.size:
            raise ValueError("a GGUF length runs past the end of the file")
        return n

    def unpack(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        data = self.f.read(size)
        if len(data) != size:
            raise ValueError("truncated GGUF header")
        return struct.unpack(fmt, data)[0]

    def string(self) -> str:
        n = self.length()
        data = self.f.read(n)
        if len(data) != n:
            raise ValueError("truncated GGUF header")
        return data.decode("utf-8", errors="replace")

    def skip_string(self) -> None:
        self.f.seek(self.length(), 1)

    def value(self, kind: int, max_array: int | None) -> Any:
        if kind in _SCALARS:
            return self.unpack(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item, n = self.unpack("<I"), self.length()
            if max_array is not None and n > max_array:
                self._skip_array(item, n)
                return []
            return [self.value(item, max_array) for _ in range(n)]
        raise ValueError(f"unknown GGUF value type {kind}")

    def _skip_array(self, item: int, n: int) -> None:
        if item in _SCALARS:
            self.f.seek(struct.calcsize(_SCALARS[item]) * n, 1)
        elif item == _STRING:
            for _ in range(n):
                self.skip_string()
        else:
            for _ in range(n):
                self.value(item, 0)


def read_header(path: Path, *, max_array: int | None = 64) -> GgufHeader:
    """Parse the header of the GGUF file at `path`. Raises ValueError if it is not GGUF
    (or is truncated), OSError if it cannot be read."""
    with open(path, "rb") as f:
        r = _Reader(f, path.stat().st_size)
        if f.read(4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        version = r.unpack("<I")
        if version < 2:
            raise ValueError(f"{path}: GGUF version {version} is not supported")
        n_tensors, n_kv = r.unpack("<Q"), r.unpack("<Q")
        meta: dict[str, Any] = {}
        for _ in range(n_kv):
            key = r.string()
            meta[key] = r.value(r.unpack("<I"), max_array)
        n_params = 0
        types: set[int] = set()
        for _ in range(n_tensors):
            r.skip_string()
            count, n_dims = 1, r.unpack("<I")
            for _ in range(n_dims):
                count *= r.unpack("<Q")
            kind = r.unpack("<I")
            r.unpack("<Q")  # offset
            n_params += count
            if n_dims >= 2:
                types.add(kind)
    return GgufHeader(meta, n_params, frozenset(types))


class HeaderCache:
    """Headers by (path, size, mtime): files in the store never change in place, so a
    model's header is read once per server. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, int, int, bool], GgufHeader] = {}

    def get(self, path: Path, *, verbose: bool = False) -> GgufHeader:
        st = path.stat()
        key = (str(path), st.st_size, st.st_mtime_ns, verbose)
        with self._lock:
            found = self._cache.get(key)
        if found is None:
            found = read_header(path, max_array=None if verbose else 64)
            with self._lock:
                self._cache[key] = found
        return found

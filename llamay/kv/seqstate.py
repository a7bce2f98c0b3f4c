"""Reading llama.cpp's per-sequence KV state (`llama_state_seq_get_data`) without loading it,
bounding its size before it arrives, and handing it to llama.cpp from a file.

A restored state that llama.cpp would reject must be told apart from one that only finds
no room: only the second may make cached prefixes and idle contexts give way. So a state is
parsed here first, in full: its cell list and every layer's K and V rows must be exactly
there, hold one sequence at positions 0..n-1, and match the layout of states this KV cache
produces (learned from one of its own; see KvManager.check_state). A state on disk
(`StateFile`) is parsed by seeking over its rows, never reading them.

Layout (llama.cpp as vendored, unified KV, one stream), all little-endian:

    u32 magic (must equal the cache's own), u32 the sequence id it was taken from
    u32 n_stream (1), u32 cell_count
    cell_count x (i32 pos, u32 n_seq_id = 1, i32 seq_id)
    u32 v_trans, u32 n_layer
    n_layer x (i32 k_type, u64 k_row_bytes, cell_count x k_row_bytes)
    v_trans:  n_layer x (i32 v_type, u32 v_el_bytes, u32 n_embd_v, n_embd_v x cell_count x v_el_bytes)
    else:     n_layer x (i32 v_type, u64 v_row_bytes, cell_count x v_row_bytes)

A model with sliding-window layers writes that from its stream count on twice, once per cache
(each with its own layers); `KvShape.max_state` allows for both.
"""

from __future__ import annotations

import io
import os
import re
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import BinaryIO

from ..errors import InvalidRequest

__all__ = [
    "Layout",
    "KvShape",
    "StateFile",
    "FILE_HEAD",
    "PREAMBLE",
    "SPOOL_PREFIX",
    "kv_shape",
    "parse_state",
    "row_bytes",
]

# What `llama_state_seq_load_file` reads before a state: 'ggsq', LLAMA_STATE_SEQ_VERSION (3),
# and a token count of 0 (the tokens live in the snapshot's header). It then reads the state
# from its stream count on: the magic and source sequence id that start
# `llama_state_seq_get_data`'s bytes (PREAMBLE of them) are not in such a file.
FILE_HEAD = struct.pack("<III", 0x67677371, 3, 0)
PREAMBLE = 8
# Name prefix of an upload's state on disk (api/restore.py) in a contexts folder.
SPOOL_PREFIX = ".restore-"
# Bytes of one cell's entry: position, sequence count and id (12), with room for the
# extension M-RoPE models add (x, y and a token).
CELL_ENTRY_MAX = 32
# Per cache: stream count, cell count, v_trans, layer count; per layer: K's and V's type and
# row size fields (12 bytes each, either V layout).
_CACHE_FIELDS = 16
_LAYER_FIELDS = 24
MARGIN = 64 * 1024


@dataclass(frozen=True)
class StateFile:
    """A state streamed to disk for `llama_state_seq_load_file`: FILE_HEAD, then the state
    from its PREAMBLE-th byte on. `preamble` holds the state's first PREAMBLE bytes; `size`
    counts the whole state, preamble included. llama.cpp reads such a file trusting its
    structure (one shorter than that aborts the process): only one `parse_state` accepted,
    and the cache's layout matched, may reach it."""

    path: str
    preamble: bytes
    size: int

    def read(self) -> bytes:
        """The state's bytes, as `llama_state_seq_get_data` gave them."""
        try:
            with open(self.path, "rb") as f:
                f.seek(len(FILE_HEAD))
                return self.preamble + f.read(self.size - PREAMBLE + 1)
        except FileNotFoundError:
            raise InvalidRequest("the uploaded state is gone (its request ended)") from None

    @contextmanager
    def held(self) -> Iterator[StateFile]:
        """This state kept open while the block runs, as a StateFile naming the open file
        (/proc/self/fd/N, where there is one): removing its name meanwhile (the upload's
        request ended) changes nothing for a reader. InvalidRequest if the name is gone."""
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            raise InvalidRequest("the uploaded state is gone (its request ended)") from None
        try:
            proc = f"/proc/self/fd/{fd}"
            yield replace(self, path=proc) if os.path.exists(proc) else self
        finally:
            os.close(fd)


@dataclass(frozen=True)
class Layout:
    """What does not depend on the number of cells: the magic, v_trans and, per layer,
    the K and V element types and row sizes."""

    preamble: bytes
    v_trans: int
    layers: tuple[tuple[int, ...], ...]

    def bytes_per_cell(self) -> int:
        """State bytes one more cached position takes (its cell entry and every row)."""
        total = 12
        for _k_type, k_row, *v in self.layers:
            total += k_row + (v[1] * v[2] if self.v_trans else v[1])
        return total


@dataclass(frozen=True)
class KvShape:
    """Bytes one cached position takes in each layer's K and V rows, at the cache's types."""

    layer_bytes: tuple[int, ...]

    def max_state(self, n_cells: int) -> int:
        """The most bytes a state of `n_cells` positions can take: llama.cpp's fixed fields
        (for two caches, as a sliding-window model keeps), per position a cell entry in each
        cache and every layer's K and V row, and MARGIN."""
        per_cell = 2 * CELL_ENTRY_MAX + sum(self.layer_bytes)
        fixed = PREAMBLE + 2 * _CACHE_FIELDS + _LAYER_FIELDS * len(self.layer_bytes)
        return fixed + max(0, n_cells) * per_cell + MARGIN


_BLOCKS = {"f32": (1, 4), "f16": (1, 2), "bf16": (1, 2), "q8_0": (32, 34), "q4_0": (32, 18), "q4_1": (32, 20),
           "q5_0": (32, 22), "q5_1": (32, 24), "iq4_nl": (32, 18)}  # fmt: skip


def row_bytes(type_kv: str, n: int) -> int:
    """ggml_row_size: bytes of `n` elements of a KV cache type (an unknown one counts as f32)."""
    block, size = _BLOCKS.get(type_kv, (1, 4))
    return -(-n // block) * size


def kv_shape(meta: Callable[[str], str | None], arch: str, n_embd: int, type_kv: str) -> KvShape:
    """The K and V row bytes per position of every layer of a model, from its GGUF metadata
    (`meta` gives a key's value as llama.cpp prints it; a per-layer array as "[a, b, ...]"):
    head_count_kv x key_length for K and x value_length for V, as llama.cpp sizes its cache.
    A value the metadata lacks falls back to the widest plausible one."""

    def ints(key: str) -> list[int]:
        value = meta(f"{arch}.{key}") or ""
        return [int(v) for v in re.findall(r"-?\d+", value)][:65536]

    n_layer = max(1, min(4096, (ints("block_count") or [256])[0]))
    n_head = max(1, max(ints("attention.head_count") or [1]))
    heads_kv = ints("attention.head_count_kv") or [n_head]
    if len(heads_kv) != n_layer:
        heads_kv = [max(heads_kv)] * n_layer
    head = max(1, n_embd // n_head)
    k_len = max(ints("attention.key_length") or [head])
    v_len = max(ints("attention.value_length") or [head])
    widths = tuple(
        row_bytes(type_kv, max(0, h) * k_len) + row_bytes(type_kv, max(0, h) * v_len) for h in heads_kv
    )
    return KvShape(widths)


class _Reader:
    """Fields of a state of `length` bytes in `f` (from where it stands)."""

    def __init__(self, f: BinaryIO, length: int) -> None:
        self.f = f
        self.length = length
        self.at = 0

    def read(self, n: int) -> bytes:
        if n < 0 or self.at + n > self.length:
            raise _Bad("it ends early")
        data = self.f.read(n)
        if len(data) != n:
            raise _Bad("it ends early")
        self.at += n
        return data

    def take(self, fmt: str) -> tuple[int, ...]:
        return struct.unpack(fmt, self.read(struct.calcsize(fmt)))

    def skip(self, n: int) -> None:
        if n < 0 or self.at + n > self.length:
            raise _Bad("it ends early")
        self.f.seek(n, io.SEEK_CUR)
        self.at += n


class _Bad(Exception):
    pass


def parse_state(state: bytes | StateFile, n_ctx: int) -> tuple[int, Layout]:
    """The number of cells a state holds and its layout; InvalidRequest (400) when it is
    not a well-formed single-sequence state of at most `n_ctx` cells."""
    try:
        if isinstance(state, StateFile):
            if len(state.preamble) != PREAMBLE:
                raise _Bad("it ends early")
            with open(state.path, "rb") as f:
                # llama.cpp aborts the process on a file shorter than the structure it reads,
                # so the file must be exactly the state the structure below is checked against.
                if os.fstat(f.fileno()).st_size != len(FILE_HEAD) + state.size - PREAMBLE:
                    raise _Bad("its file is not the size of the state")
                f.seek(len(FILE_HEAD))
                return _parse(state.preamble, _Reader(f, state.size - PREAMBLE), n_ctx)
        r = _Reader(io.BytesIO(state), len(state))
        return _parse(r.read(PREAMBLE), r, n_ctx)
    except _Bad as exc:
        raise InvalidRequest(f"the snapshot's KV state is damaged: {exc}") from None


def _parse(preamble: bytes, r: _Reader, n_ctx: int) -> tuple[int, Layout]:
    (n_stream,) = r.take("<I")
    if n_stream != 1:
        raise _Bad(f"{n_stream} streams (this server keeps one)")
    (cells,) = r.take("<I")
    if not 0 < cells <= n_ctx:
        raise _Bad(f"{cells} cells (the context holds {n_ctx})")
    # Cells come in cell order, which need not be position order (a sequence placed across
    # the end of the cache wraps around); each of positions 0..cells-1 must be there once.
    seen = bytearray(cells)
    for i, (pos, n_seq, _seq) in enumerate(struct.iter_unpack("<iIi", r.read(12 * cells))):
        if not 0 <= pos < cells or seen[pos] or n_seq != 1:
            raise _Bad(f"cell {i} holds position {pos} of {n_seq} sequences")
        seen[pos] = 1
    v_trans, n_layer = r.take("<II")
    if v_trans not in (0, 1) or not 0 < n_layer <= 4096:
        raise _Bad("its layer header is invalid")
    layers: list[tuple[int, ...]] = []
    for _ in range(n_layer):
        k_type, k_row = r.take("<iQ")
        r.skip(k_row * cells)
        layers.append((k_type, k_row))
    for i in range(n_layer):
        if v_trans:
            v_type, v_el, n_embd_v = r.take("<iII")
            r.skip(v_el * n_embd_v * cells)
            layers[i] += (v_type, v_el, n_embd_v)
        else:
            v_type, v_row = r.take("<iQ")
            r.skip(v_row * cells)
            layers[i] += (v_type, v_row)
    if r.at != r.length:
        raise _Bad(f"{r.length - r.at} bytes follow its last layer")
    return cells, Layout(preamble[:4], v_trans, tuple(layers))

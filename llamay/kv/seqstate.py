"""Reading llama.cpp's per-sequence KV state (`llama_state_seq_get_data`) without loading it.

A restored state that llama.cpp would reject must be told apart from one that only finds
no room: only the second may make cached prefixes and idle contexts give way. So a state is
parsed here first, in full: its cell list and every layer's K and V rows must be exactly
there, hold one sequence at positions 0..n-1, and match the layout of states this KV cache
produces (learned from one of its own; see KvManager.check_state).

Layout (llama.cpp as vendored, unified KV, one stream), all little-endian:

    u32 magic (must equal the cache's own), u32 the sequence id it was taken from
    u32 n_stream (1), u32 cell_count
    cell_count x (i32 pos, u32 n_seq_id = 1, i32 seq_id)
    u32 v_trans, u32 n_layer
    n_layer x (i32 k_type, u64 k_row_bytes, cell_count x k_row_bytes)
    v_trans:  n_layer x (i32 v_type, u32 v_el_bytes, u32 n_embd_v, n_embd_v x cell_count x v_el_bytes)
    else:     n_layer x (i32 v_type, u64 v_row_bytes, cell_count x v_row_bytes)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..errors import InvalidRequest

__all__ = ["Layout", "parse_state"]


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


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, fmt: str) -> tuple[int, ...]:
        size = struct.calcsize(fmt)
        if self.at + size > len(self.data):
            raise _Bad("it ends early")
        out = struct.unpack_from(fmt, self.data, self.at)
        self.at += size
        return out

    def skip(self, n: int) -> None:
        if n < 0 or self.at + n > len(self.data):
            raise _Bad("it ends early")
        self.at += n


class _Bad(Exception):
    pass


def parse_state(state: bytes, n_ctx: int) -> tuple[int, Layout]:
    """The number of cells a state holds and its layout; InvalidRequest (400) when it is
    not a well-formed single-sequence state of at most `n_ctx` cells."""
    try:
        return _parse(state, n_ctx)
    except _Bad as exc:
        raise InvalidRequest(f"the snapshot's KV state is damaged: {exc}") from None


def _parse(state: bytes, n_ctx: int) -> tuple[int, Layout]:
    r = _Reader(state)
    r.take("<II")
    preamble = state[:4]
    (n_stream,) = r.take("<I")
    if n_stream != 1:
        raise _Bad(f"{n_stream} streams (this server keeps one)")
    (cells,) = r.take("<I")
    if not 0 < cells <= n_ctx:
        raise _Bad(f"{cells} cells (the context holds {n_ctx})")
    # Cells come in cell order, which need not be position order (a sequence placed across
    # the end of the cache wraps around); each of positions 0..cells-1 must be there once.
    seen = bytearray(cells)
    for i in range(cells):
        pos, n_seq = r.take("<iI")
        if not 0 <= pos < cells or seen[pos] or n_seq != 1:
            raise _Bad(f"cell {i} holds position {pos} of {n_seq} sequences")
        seen[pos] = 1
        r.take("<i")
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
    if r.at != len(state):
        raise _Bad(f"{len(state) - r.at} bytes follow its last layer")
    return cells, Layout(preamble, v_trans, tuple(layers))

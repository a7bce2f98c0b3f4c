"""Snapshot signing and the state parser that tells a damaged state from one without room."""

from __future__ import annotations

import struct

import pytest

from llamay.errors import InvalidRequest
from llamay.kv.seqstate import parse_state
from llamay.kv.snapshot import SIG_LEN, SnapshotHeader, read_signed, write_snapshot

HEADER = SnapshotHeader("m", "ab" * 32, [1, 2, 3], "ann", None, 1_700_000_000.0, "u:ann", 3)


def state(
    cells: int,
    layers: int = 2,
    k_row: int = 8,
    v_el: int = 2,
    n_embd_v: int = 4,
    order: list[int] | None = None,
) -> bytes:
    """A single-sequence state as llama.cpp writes it (transposed V); `order`: the position
    each cell holds, in cell order (default 0, 1, 2, ...)."""
    out = struct.pack("<III", 0xAF143CD8, 0, 1) + struct.pack("<I", cells)
    out += b"".join(struct.pack("<iIi", p, 1, 0) for p in (order or range(cells)))
    out += struct.pack("<II", 1, layers)
    out += b"".join(struct.pack("<iQ", 1, k_row) + b"k" * k_row * cells for _ in range(layers))
    out += b"".join(
        struct.pack("<iII", 1, v_el, n_embd_v) + b"v" * v_el * n_embd_v * cells for _ in range(layers)
    )
    return out


def test_signature_says_who_wrote_it() -> None:
    data = write_snapshot(HEADER, state(3), key=b"k" * 32)
    assert read_signed(data, b"k" * 32)[2] is True
    assert read_signed(data, b"x" * 32)[2] is False  # another server's key: readable, not trusted
    assert read_signed(write_snapshot(HEADER, state(3)), b"k" * 32)[2] is False
    header, _, _ = read_signed(data, None)
    assert header.namespace == "u:ann" and header.n_kv == 3
    at = len(data) - SIG_LEN - 1  # a state byte
    with pytest.raises(InvalidRequest, match="checksum"):
        read_signed(data[:at] + bytes([data[at] ^ 1]) + data[at + 1 :], b"k" * 32)
    forged = data.replace(b'"owner":"ann"', b'"owner":"bob"')  # the header is covered too
    assert read_signed(forged, b"k" * 32)[0].owner == "bob" and read_signed(forged, b"k" * 32)[2] is False


@pytest.mark.parametrize("created", [float("inf"), float("nan"), 1e300, -1.0])
def test_implausible_created_is_refused(created: float) -> None:
    bad = SnapshotHeader("m", "ab" * 32, [1], None, None, created)
    with pytest.raises(InvalidRequest, match="created"):
        read_signed(write_snapshot(bad, state(1)), None)


def test_state_parser() -> None:
    cells, layout = parse_state(state(5), n_ctx=16)
    assert cells == 5 and layout.bytes_per_cell() == 12 + 2 * (8 + 2 * 4)
    assert parse_state(state(2), 16)[1] == layout  # the layout does not depend on the cell count
    # A sequence that wrapped around the end of the cache comes out in cell order.
    assert parse_state(state(5, order=[3, 4, 0, 1, 2]), n_ctx=16)[0] == 5
    good = state(3)
    twice, beyond = state(3, order=[0, 1, 1]), state(3, order=[0, 1, 3])
    for bad in (
        good[:-1],
        good + b"\0",
        state(20),
        good[:16] + struct.pack("<i", 7) + good[20:],
        twice,
        beyond,
    ):
        with pytest.raises(InvalidRequest, match="damaged"):
            parse_state(bad, n_ctx=16)

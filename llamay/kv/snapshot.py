"""The context snapshot file: a header that says what the KV state is, then the state.

    magic   8 bytes  b"LLAMAYCX"
    version u16 LE   FORMAT_VERSION
    hlen    u32 LE   length of the header
    header  hlen     UTF-8 JSON: model {name, sha256}, tokens, owner, marking, created,
                     state_len, state_sha256
    state   state_len bytes from llama_state_seq_get_data

A truncated or altered file fails `read_snapshot` with InvalidRequest (HTTP 400) before
anything touches the engine; a snapshot of other weights fails `check_model` with
Conflict (409) naming both models.
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass
from typing import Any

from ..errors import Conflict, InvalidRequest

__all__ = ["MAGIC", "FORMAT_VERSION", "SnapshotHeader", "write_snapshot", "read_snapshot", "check_model"]

MAGIC = b"LLAMAYCX"
FORMAT_VERSION = 1
_PREFIX = struct.Struct("<8sHI")
MAX_HEADER = 64 * 1024 * 1024


@dataclass(frozen=True)
class SnapshotHeader:
    model_name: str
    model_sha256: str
    tokens: list[int]
    owner: str | None
    marking: str | None
    created: float

    def to_json(self, state: bytes) -> dict[str, Any]:
        return {
            "model": {"name": self.model_name, "sha256": self.model_sha256},
            "tokens": self.tokens,
            "owner": self.owner,
            "marking": self.marking,
            "created": self.created,
            "state_len": len(state),
            "state_sha256": hashlib.sha256(state).hexdigest(),
        }


def write_snapshot(header: SnapshotHeader, state: bytes) -> bytes:
    body = json.dumps(header.to_json(state), separators=(",", ":")).encode()
    return _PREFIX.pack(MAGIC, FORMAT_VERSION, len(body)) + body + state


def read_snapshot(data: bytes) -> tuple[SnapshotHeader, bytes]:
    """Parse and verify a snapshot file; InvalidRequest says what is wrong with it."""
    if len(data) < _PREFIX.size:
        raise InvalidRequest("not a llamay snapshot: the file is too short")
    magic, version, hlen = _PREFIX.unpack_from(data)
    if magic != MAGIC:
        raise InvalidRequest("not a llamay snapshot: bad magic bytes")
    if version != FORMAT_VERSION:
        raise InvalidRequest(
            f"unsupported snapshot format version {version} (this server reads {FORMAT_VERSION})"
        )
    if hlen > MAX_HEADER or _PREFIX.size + hlen > len(data):
        raise InvalidRequest("the snapshot is truncated (its header is incomplete)")
    try:
        h = json.loads(data[_PREFIX.size : _PREFIX.size + hlen])
        model = h["model"]
        header = SnapshotHeader(
            model_name=str(model["name"]),
            model_sha256=str(model["sha256"]),
            tokens=[int(t) for t in h["tokens"]],
            owner=h.get("owner"),
            marking=h.get("marking"),
            created=float(h["created"]),
        )
        state_len = int(h["state_len"])
        state_sha = str(h["state_sha256"])
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidRequest(f"the snapshot header is corrupt ({type(exc).__name__})") from None
    state = data[_PREFIX.size + hlen :]
    if len(state) != state_len:
        raise InvalidRequest(f"the snapshot is truncated: {len(state)} of {state_len} state bytes")
    if hashlib.sha256(state).hexdigest() != state_sha:
        raise InvalidRequest("the snapshot is corrupt: its state does not match its checksum")
    return header, state


def check_model(header: SnapshotHeader, name: str, sha256: str) -> None:
    if header.model_sha256 != sha256:
        raise Conflict(
            f"the snapshot was made with model '{header.model_name}' (sha256 {header.model_sha256[:12]}…) "
            f"but this server runs '{name}' (sha256 {sha256[:12]}…)"
        )

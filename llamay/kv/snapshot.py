"""The context snapshot file: a header that says what the KV state is, then the state.

    magic   8 bytes  b"LLAMAYCX"
    version u16 LE   FORMAT_VERSION
    hlen    u32 LE   length of the header
    header  hlen     UTF-8 JSON: model {name, sha256}, tokens, owner, marking, created,
                     state_len, state_sha256 (and namespace, n_kv when known)
    state   state_len bytes from llama_state_seq_get_data
    sig     version 2 only: b"LLAMAYSG" + HMAC-SHA256(key, magic..header + sha256(state))

Version 1 files (spill files, older snapshots) carry no signature. A signature says that a
server holding the key wrote the header and state as they are; only such a snapshot may be
restored with the namespace and owner its header names (see docs/security.md). The header
is self-declared otherwise.

A truncated or altered file fails `read_snapshot` with InvalidRequest (HTTP 400) before
anything touches the engine; a snapshot of other weights fails `check_model` with
Conflict (409) naming both models.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import struct
from dataclasses import dataclass
from typing import Any

from ..errors import Conflict, InvalidRequest

__all__ = [
    "MAGIC",
    "FORMAT_VERSION",
    "SnapshotHeader",
    "write_snapshot",
    "read_snapshot",
    "check_model",
    "parse_prefix",
    "parse_header",
    "signature",
    "SIG_MAGIC",
    "SIG_LEN",
    "read_signed",
    "PREFIX_SIZE",
]

MAGIC = b"LLAMAYCX"
FORMAT_VERSION = 1
SIGNED_VERSION = 2
_PREFIX = struct.Struct("<8sHI")
PREFIX_SIZE = _PREFIX.size
MAX_HEADER = 64 * 1024 * 1024
SIG_MAGIC = b"LLAMAYSG"
SIG_LEN = len(SIG_MAGIC) + 32
# Latest plausible creation time (2100-01-01): a header may not claim Infinity, NaN or 1e308.
MAX_CREATED = 4_102_444_800.0


@dataclass(frozen=True)
class SnapshotHeader:
    model_name: str
    model_sha256: str
    tokens: list[int]
    owner: str | None
    marking: str | None
    created: float
    namespace: str | None = None
    n_kv: int | None = None

    def to_json(self, state: bytes) -> dict[str, Any]:
        out: dict[str, Any] = {
            "model": {"name": self.model_name, "sha256": self.model_sha256},
            "tokens": self.tokens,
            "owner": self.owner,
            "marking": self.marking,
            "created": self.created,
            "state_len": len(state),
            "state_sha256": hashlib.sha256(state).hexdigest(),
        }
        if self.namespace is not None:
            out["namespace"] = self.namespace
        if self.n_kv is not None:
            out["n_kv"] = self.n_kv
        return out


def signature(key: bytes, head: bytes, state_sha256: str) -> bytes:
    """The HMAC of a snapshot: over its magic, version, header length and header, and the
    SHA-256 of its state (which the header also names), so header and state are covered."""
    return hmac.new(key, head + bytes.fromhex(state_sha256), hashlib.sha256).digest()


def write_snapshot(header: SnapshotHeader, state: bytes, key: bytes | None = None) -> bytes:
    """The file; with `key`, a signed (version 2) one."""
    doc = header.to_json(state)
    body = json.dumps(doc, separators=(",", ":")).encode()
    version = FORMAT_VERSION if key is None else SIGNED_VERSION
    head = _PREFIX.pack(MAGIC, version, len(body)) + body
    if key is None:
        return head + state
    return head + state + SIG_MAGIC + signature(key, head, doc["state_sha256"])


def parse_prefix(data: bytes, max_header: int = MAX_HEADER) -> tuple[int, int]:
    """The format version and header length from the first PREFIX_SIZE bytes."""
    if len(data) < _PREFIX.size:
        raise InvalidRequest("not a llamay snapshot: the file is too short")
    magic, version, hlen = _PREFIX.unpack_from(data)
    if magic != MAGIC:
        raise InvalidRequest("not a llamay snapshot: bad magic bytes")
    if version not in (FORMAT_VERSION, SIGNED_VERSION):
        raise InvalidRequest(
            f"unsupported snapshot format version {version} (this server reads {FORMAT_VERSION} and {SIGNED_VERSION})"
        )
    if hlen > max_header:
        raise InvalidRequest(f"the snapshot header is {hlen} bytes; at most {max_header} fit this model")
    return version, hlen


def parse_header(raw: bytes) -> tuple[SnapshotHeader, int, str]:
    """The header, the state's length and its SHA-256 (hex); InvalidRequest if corrupt."""
    try:
        h = json.loads(raw)
        model = h["model"]
        header = SnapshotHeader(
            model_name=str(model["name"]),
            model_sha256=str(model["sha256"]),
            tokens=[int(t) for t in h["tokens"]],
            owner=_opt_str(h.get("owner")),
            marking=_opt_str(h.get("marking")),
            created=float(h["created"]),
            namespace=_opt_str(h.get("namespace")),
            n_kv=int(h["n_kv"]) if h.get("n_kv") is not None else None,
        )
        state_len = int(h["state_len"])
        state_sha = str(h["state_sha256"])
        bytes.fromhex(state_sha)
    except (ValueError, KeyError, TypeError, OverflowError) as exc:
        raise InvalidRequest(f"the snapshot header is corrupt ({type(exc).__name__})") from None
    if not (math.isfinite(header.created) and 0 <= header.created <= MAX_CREATED):
        raise InvalidRequest("the snapshot header is corrupt: 'created' is not a plausible time")
    if state_len < 0 or len(state_sha) != 64:
        raise InvalidRequest("the snapshot header is corrupt: bad state length or checksum")
    return header, state_len, state_sha


def _opt_str(v: object) -> str | None:
    if v is None or isinstance(v, str):
        return v
    raise TypeError("expected a string")


def read_snapshot(data: bytes, key: bytes | None = None) -> tuple[SnapshotHeader, bytes]:
    """Parse and verify a snapshot file; InvalidRequest says what is wrong with it. A
    signature is checked only with `key` (see `signed`)."""
    header, state, _ = read_signed(data, key)
    return header, state


def read_signed(data: bytes, key: bytes | None) -> tuple[SnapshotHeader, bytes, bool]:
    """As `read_snapshot`, and whether `key` signed it (False without a key, for an
    unsigned file, or one signed with another key: such a file is still readable)."""
    version, hlen = parse_prefix(data)
    if _PREFIX.size + hlen > len(data):
        raise InvalidRequest("the snapshot is truncated (its header is incomplete)")
    head = data[: _PREFIX.size + hlen]
    header, state_len, state_sha = parse_header(head[_PREFIX.size :])
    rest = data[len(head) :]
    tail = SIG_LEN if version == SIGNED_VERSION else 0
    if len(rest) != state_len + tail:
        raise InvalidRequest(f"the snapshot is truncated: {len(rest) - tail} of {state_len} state bytes")
    state = rest[:state_len]
    if hashlib.sha256(state).hexdigest() != state_sha:
        raise InvalidRequest("the snapshot is corrupt: its state does not match its checksum")
    signed = False
    if tail:
        sig = rest[state_len:]
        if sig[: len(SIG_MAGIC)] != SIG_MAGIC:
            raise InvalidRequest("the snapshot is corrupt: its signature block is damaged")
        signed = key is not None and hmac.compare_digest(
            sig[len(SIG_MAGIC) :], signature(key, head, state_sha)
        )
    return header, state, signed


def check_model(header: SnapshotHeader, name: str, sha256: str) -> None:
    if header.model_sha256 != sha256:
        raise Conflict(
            f"the snapshot was made with model '{header.model_name}' (sha256 {header.model_sha256[:12]}…) "
            f"but this server runs '{name}' (sha256 {sha256[:12]}…)"
        )

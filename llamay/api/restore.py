"""POST /v1/contexts/restore: a snapshot file streamed to disk, checked, then restored.

The body is never held in memory as it arrives: the prefix and header are read first and
checked (format, model, token count, declared state size against the largest state this
model's context can hold), then the state streams to a temporary file while its SHA-256
and the server's HMAC are computed, and only a complete, verified state is read back for
llama.cpp. At most `MAX_RESTORES` run at once; more is a 503 with Retry-After.

Trust: a snapshot signed with the server's key (kv/snapshot.py) was written by a server of
this fleet as it is, so its header's owner and namespace hold (a shared one only for an
admin). Any other snapshot restores for the caller alone: owned by the caller, in the
caller's prefix-cache namespace, whatever its header claims.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import secrets
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from starlette.requests import Request
from starlette.responses import Response

from ..auth import Principal
from ..errors import InvalidRequest, Overloaded, PayloadTooLarge, RequestTimeout
from ..kv.pool import SHARED
from ..kv.snapshot import (
    PREFIX_SIZE,
    SIG_LEN,
    SIG_MAGIC,
    SIGNED_VERSION,
    SnapshotHeader,
    check_model,
    parse_header,
    parse_prefix,
    signature,
)
from ..runtime import LoadedModel, Runtime
from .authn import principal_of
from .http import IDLE_TIMEOUT, json_response

__all__ = ["restore_context", "snapshot_key", "state_cap", "MAX_RESTORES", "KEY_ENV"]

MAX_RESTORES = 2
KEY_ENV = "LLAMAY_SNAPSHOT_KEY"
KEY_FILE = "snapshot.key"
_CHUNK = 1 << 20


def snapshot_key(request: Request) -> bytes:
    """The server's snapshot signing key: $LLAMAY_SNAPSHOT_KEY (a fleet shares it), else
    `<home>/snapshot.key`, created once with mode 0600; without a home, one per process."""
    state = request.app.state
    key = getattr(state, "snapshot_key", None)
    if key is None:
        runtime: Runtime = state.runtime
        key = load_key(runtime.config.home, os.environ.get(KEY_ENV))
        state.snapshot_key = key
    return key  # type: ignore[no-any-return]


def load_key(home: Path | None, given: str | None) -> bytes:
    if given:
        if len(given) < 16:
            raise ValueError(f"{KEY_ENV} must be at least 16 characters")
        return hashlib.sha256(given.encode()).digest()
    if home is None:
        return secrets.token_bytes(32)
    path = home / KEY_FILE
    home.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        text = path.read_text().strip()
        if len(text) < 32:
            raise ValueError(
                f"the snapshot key file {path} is damaged; remove it to make a new one"
            ) from None
        return bytes.fromhex(text)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    return bytes.fromhex(path.read_text().strip())


def state_cap(lm: LoadedModel) -> int:
    """The largest KV state this model's context can hold, with a margin: every layer's K
    and V at f32 for the widest of the embedding and the KV heads, for each of n_ctx cells
    (from the GGUF's metadata; a value it lacks or gives per layer falls back wide)."""
    info = lm.model.info

    def meta(key: str, default: int) -> int:
        value = lm.model.meta(f"{info.arch}.{key}")
        return int(value) if value and value.isdigit() else default

    n_head = max(1, meta("attention.head_count", 1))
    head = max(meta("attention.key_length", 0), meta("attention.value_length", 0), info.n_embd // n_head)
    width = max(info.n_embd, meta("attention.head_count_kv", n_head) * head)
    per_token = meta("block_count", 256) * 2 * width * 4 + 16
    return lm.engine.n_ctx * per_token + (1 << 20)


def header_cap(lm: LoadedModel) -> int:
    """The longest header a snapshot of this model can have (n_ctx token ids and fields)."""
    return lm.engine.n_ctx * 12 + 64 * 1024


class _Body:
    """The request body in exact pieces, each arrival within IDLE_TIMEOUT."""

    def __init__(self, request: Request) -> None:
        self._it = request.stream().__aiter__()
        self._buf = b""
        self._done = False

    async def _more(self) -> bool:
        if self._done:
            return False
        try:
            async with asyncio.timeout(IDLE_TIMEOUT):
                chunk = await self._it.__anext__()
        except StopAsyncIteration:
            self._done = True
            return False
        except TimeoutError:
            raise RequestTimeout(f"the request body stalled for {IDLE_TIMEOUT:g}s") from None
        self._buf += chunk
        return True

    async def exactly(self, n: int, what: str) -> bytes:
        while len(self._buf) < n:
            if not await self._more():
                raise InvalidRequest(f"the snapshot is truncated ({what} is incomplete)")
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    async def pieces(self, n: int) -> AsyncIterator[bytes]:
        """Up to `n` bytes, as they come (the caller checks the count)."""
        while n > 0:
            if not self._buf and not await self._more():
                return
            piece, self._buf = self._buf[:n], self._buf[n:]
            n -= len(piece)
            yield piece

    async def rest(self, limit: int) -> bytes:
        """What remains, refused past `limit` bytes."""
        while len(self._buf) <= limit and await self._more():
            pass
        if len(self._buf) > limit:
            raise InvalidRequest("the snapshot has unexpected bytes after its state")
        return self._buf


def _slots(request: Request) -> asyncio.Semaphore:
    state = request.app.state
    if getattr(state, "restore_slots", None) is None:
        state.restore_slots = asyncio.Semaphore(MAX_RESTORES)
    return state.restore_slots  # type: ignore[no-any-return]


async def restore_context(request: Request) -> Response:
    principal = principal_of(request)
    runtime: Runtime = request.app.state.runtime
    slots = _slots(request)
    if slots.locked():
        raise Overloaded(f"{MAX_RESTORES} restores are running; retry shortly", retry_after=2)
    async with slots:
        lm = await runtime.use(request.query_params.get("model", ""))
        cap = state_cap(lm)
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > cap + header_cap(lm) + SIG_LEN:
            raise PayloadTooLarge(f"a snapshot of this model is at most {cap} state bytes")
        header, state, signed = await _receive(request, lm, cap)
        owner, namespace = _trust(principal, header, signed, not request.app.state.keys.enabled)
        from .contexts import contexts_of, enforce_quota

        await enforce_quota(request, contexts=1, kv_bytes=len(state))

        rec = await contexts_of(request).restore(lm, header, state, owner=owner, namespace=namespace)
    body = {"id": rec.id, "object": "context", "model": lm.name, "tokens": len(rec.tokens)}
    return json_response(body | {"signed": signed, "shared": namespace == SHARED})


async def _receive(request: Request, lm: LoadedModel, cap: int) -> tuple[SnapshotHeader, bytes, bool]:
    body = _Body(request)
    prefix = await body.exactly(PREFIX_SIZE, "its prefix")
    version, hlen = parse_prefix(prefix, header_cap(lm))
    raw = await body.exactly(hlen, "its header")
    header, state_len, state_sha = parse_header(raw)
    check_model(header, lm.name, lm.sha256 or "")
    if len(header.tokens) >= lm.engine.n_ctx:
        raise InvalidRequest(
            f"the snapshot holds {len(header.tokens)} tokens; this context holds {lm.engine.n_ctx}"
        )
    if state_len > cap:
        raise PayloadTooLarge(
            f"the snapshot declares {state_len} state bytes; this model's state is at most {cap}"
        )
    digest = hashlib.sha256()
    with tempfile.TemporaryFile(prefix="llamay-restore-") as f:
        got = 0
        async for piece in body.pieces(state_len):
            f.write(piece)
            digest.update(piece)
            got += len(piece)
        if got != state_len:
            raise InvalidRequest(f"the snapshot is truncated: {got} of {state_len} state bytes")
        tail = await body.rest(SIG_LEN if version == SIGNED_VERSION else 0)
        if digest.hexdigest() != state_sha:
            raise InvalidRequest("the snapshot is corrupt: its state does not match its checksum")
        signed = False
        if version == SIGNED_VERSION:
            if len(tail) != SIG_LEN or tail[: len(SIG_MAGIC)] != SIG_MAGIC:
                raise InvalidRequest("the snapshot is corrupt: its signature block is damaged")
            expected = signature(snapshot_key(request), prefix + raw, state_sha)
            signed = hmac.compare_digest(tail[len(SIG_MAGIC) :], expected)
        f.seek(0)
        state = await asyncio.to_thread(f.read)
    return header, state, signed


def _trust(
    principal: Principal, header: SnapshotHeader, signed: bool, single_user: bool
) -> tuple[str | None, str]:
    """Owner and namespace of a restored context. Someone else's snapshot is a 403 either
    way (the owner a header claims is not proof, but it is a clear mistake)."""
    if header.owner is not None:
        principal.check_owner(header.owner, "the snapshot")
    mine = principal.owner_tag(single_user)
    if not signed:
        return mine, principal.namespace
    if header.namespace == SHARED:
        return (header.owner, SHARED) if principal.admin else (mine, principal.namespace)
    if principal.admin and header.namespace is not None:
        return header.owner, header.namespace
    return mine, principal.namespace

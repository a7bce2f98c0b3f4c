"""POST /v1/contexts/restore: a snapshot file streamed to disk, checked, then restored.

The body is never held in memory as it arrives: the prefix and header are read first and
checked (format, model, token count, declared state size against the largest state this
model's context can hold), then the state streams to a temporary file while its SHA-256
and the server's HMAC are computed, and only a complete, verified state is read back for
llama.cpp. At most `MAX_RESTORES` run at once; more is a 503 with Retry-After.

Trust: a snapshot signed with the server's key (kv/snapshot.py) was written by a server of
this fleet as it is, so its header's owner and namespace hold (a shared one only for an
admin). Any other snapshot restores for the caller alone: owned by the caller, in the
caller's private prefix-cache namespace (never its `cache_group`'s), whatever its header
claims.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import tempfile
from collections.abc import AsyncIterator

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
from ..runtime import LoadedModel
from .authn import principal_of
from .fields import check_size
from .http import IDLE_TIMEOUT, json_response
from .state import MAX_RESTORES, state_of
from .tenancy import contexts_of, enforce_quota

__all__ = ["restore_context", "snapshot_key", "state_cap", "MAX_RESTORES"]

_CHUNK = 1 << 20


def snapshot_key(request: Request) -> bytes:
    """The server's snapshot signing key (see `state.load_key`)."""
    return state_of(request).snapshot_key


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
    """The request body in exact pieces: each arrival within IDLE_TIMEOUT, and the whole
    body within the server's `body_timeout` of the first byte asked for (as `http.read_body`),
    so a client trickling a byte just inside the idle timeout cannot hold a restore slot."""

    def __init__(self, request: Request) -> None:
        self._it = request.stream().__aiter__()
        self._buf = b""
        self._done = False
        self._total = state_of(request).limits.body_timeout
        self._deadline = asyncio.get_running_loop().time() + self._total

    async def _more(self) -> bool:
        if self._done:
            return False
        left = self._deadline - asyncio.get_running_loop().time()
        try:
            async with asyncio.timeout(min(IDLE_TIMEOUT, max(0.0, left))):
                chunk = await self._it.__anext__()
        except StopAsyncIteration:
            self._done = True
            return False
        except TimeoutError:
            if left <= IDLE_TIMEOUT:
                raise RequestTimeout(f"the snapshot did not arrive within {self._total:g}s") from None
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


async def restore_context(request: Request) -> Response:
    principal = principal_of(request)
    server = state_of(request)
    runtime, slots = server.runtime, server.restore_slots
    if slots.locked():
        raise Overloaded(f"{MAX_RESTORES} restores are running; retry shortly", retry_after=2)
    async with slots:
        lm = await runtime.use(request.query_params.get("model", ""))
        cap = state_cap(lm)
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > cap + header_cap(lm) + SIG_LEN:
            raise PayloadTooLarge(f"a snapshot of this model is at most {cap} state bytes")
        header, state, signed = await _receive(request, lm, cap)
        owner, namespace = _trust(principal, header, signed, not server.keys.enabled)
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
    if header.marking is not None:  # kept with the context, as a created one's is
        check_size(header.marking, state_of(request).limits.max_field, "marking")
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
        return mine, private_namespace(principal)
    if header.namespace == SHARED:
        return (header.owner, SHARED) if principal.admin else (mine, principal.namespace)
    if principal.admin and header.namespace is not None:
        return header.owner, header.namespace
    return mine, principal.namespace


def private_namespace(principal: Principal) -> str:
    """The namespace only this principal's requests read: its own even when its key is in a
    `cache_group` (an unsigned snapshot's KV is whatever its maker wrote, so it must not
    reach the group's other members). Other namespaces are private already."""
    if principal.namespace.startswith("g:"):
        return f"u:{principal.name}"
    return principal.namespace

"""POST /v1/contexts/restore: a snapshot file streamed to disk, checked, then restored.

The body is never held in memory: the prefix and header are read first and checked (format,
model, token count), and the largest state that many tokens can take for this model
(kv/seqstate.KvShape, from its layers' K and V widths at the cache's types) bounds what may
follow, before any of it is read: a declared state or Content-Length beyond it is a 413
naming both sizes. The state then streams to a 0600 file under a random name in the model's
private contexts folder while its SHA-256 and the server's HMAC are computed, and llama.cpp
loads a complete, verified state from that file (`llama_state_seq_load_file`, a layer's rows
at a time): memory grows by a chunk, never by the state (but while the cache holds no KV at
all, see KvManager.restore). The file goes with the request, however it ends. At most
`MAX_RESTORES` run at once; more is a 503 with Retry-After.

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
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from starlette.requests import Request
from starlette.responses import Response

from ..auth import Principal
from ..errors import InvalidRequest, Overloaded, PayloadTooLarge, RequestTimeout
from ..kv.pool import SHARED
from ..kv.seqstate import FILE_HEAD, PREAMBLE, SPOOL_PREFIX, KvShape, StateFile, kv_shape
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

__all__ = ["restore_context", "snapshot_key", "state_shape", "MAX_RESTORES"]


def snapshot_key(request: Request) -> bytes:
    """The server's snapshot signing key (see `state.load_key`)."""
    return state_of(request).snapshot_key


def state_shape(lm: LoadedModel) -> KvShape:
    """The K and V bytes per position of this model's cache (see seqstate.kv_shape)."""
    info = lm.model.info
    type_kv = getattr(getattr(getattr(lm.engine, "ctx", None), "config", None), "type_kv", "f32")
    return kv_shape(lm.model.meta, info.arch, info.n_embd, type_kv)


def header_cap(lm: LoadedModel) -> int:
    """The longest header a snapshot of this model can have (n_ctx token ids and fields)."""
    return lm.engine.n_ctx * 12 + 64 * 1024


def _content_length(request: Request) -> int | None:
    declared = request.headers.get("content-length")
    return int(declared) if declared and declared.isdigit() else None


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
        shape = state_shape(lm)
        declared = _content_length(request)
        most = PREFIX_SIZE + header_cap(lm) + shape.max_state(lm.engine.n_ctx) + SIG_LEN
        if declared is not None and declared > most:
            raise PayloadTooLarge(
                f"the upload is {declared} bytes; a snapshot of this model is at most {most} bytes"
            )
        folder = lm.engine.kv.contexts.folder
        with _spool(folder) as (spool, path):
            header, state, signed = await _receive(request, lm, shape, declared, spool, path)
            owner, namespace = _trust(principal, header, signed, not server.keys.enabled)
            await enforce_quota(request, contexts=1, kv_bytes=state.size)
            rec = await contexts_of(request).restore(lm, header, state, owner=owner, namespace=namespace)
    body = {"id": rec.id, "object": "context", "model": lm.name, "tokens": len(rec.tokens)}
    return json_response(body | {"signed": signed, "shared": namespace == SHARED})


@contextmanager
def _spool(folder: Path) -> Iterator[tuple[BinaryIO, str]]:
    """A new file, mode 0600 under a random name, in the model's private contexts folder
    (0700), removed when the block ends, whichever way (a client gone mid-upload, an error,
    a refusal); one a killed process left is removed when the folder is next opened
    (Contexts.load_all). The engine opens it by name once and reads its own descriptor, so
    a removal while it loads changes nothing."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(prefix=SPOOL_PREFIX, dir=folder) as named:
        yield named.file, named.name  # type: ignore[misc]


async def _receive(
    request: Request, lm: LoadedModel, shape: KvShape, declared: int | None, spool: BinaryIO, path: str
) -> tuple[SnapshotHeader, StateFile, bool]:
    """Read the upload into `spool` (at `path`) as a StateFile, checking as it comes: the
    header before anything else, the state's size against the most its tokens can take
    before any of it, its checksum and signature at the end."""
    body = _Body(request)
    prefix = await body.exactly(PREFIX_SIZE, "its prefix")
    version, hlen = parse_prefix(prefix, header_cap(lm))
    raw = await body.exactly(hlen, "its header")
    header, state_len, state_sha = parse_header(raw)
    check_model(header, lm.name, lm.sha256 or "")
    if header.marking is not None:  # kept with the context, as a created one's is
        check_size(header.marking, state_of(request).limits.max_field, "marking")
    n = len(header.tokens)
    if n >= lm.engine.n_ctx:
        raise InvalidRequest(f"the snapshot holds {n} tokens; this context holds {lm.engine.n_ctx}")
    bound = shape.max_state(n)
    if state_len > bound:
        raise PayloadTooLarge(
            f"the snapshot declares {state_len} state bytes for {n} tokens; "
            f"a state of {n} tokens of this model is at most {bound} bytes"
        )
    tail_len = SIG_LEN if version == SIGNED_VERSION else 0
    expected = PREFIX_SIZE + hlen + state_len + tail_len
    if declared is not None and declared > PREFIX_SIZE + hlen + bound + tail_len:
        raise PayloadTooLarge(
            f"the upload is {declared} bytes; a snapshot of {n} tokens of this model is at most "
            f"{PREFIX_SIZE + hlen + bound + tail_len} bytes"
        )
    if declared is not None and declared != expected:
        raise InvalidRequest(
            f"the upload is {declared} bytes but its header makes the snapshot {expected} bytes"
        )
    digest = hashlib.sha256()
    preamble = await body.exactly(min(PREAMBLE, state_len), "its state")
    digest.update(preamble)
    spool.write(FILE_HEAD)
    got = len(preamble)
    async for piece in body.pieces(state_len - got):
        spool.write(piece)
        digest.update(piece)
        got += len(piece)
    if got != state_len:
        raise InvalidRequest(f"the snapshot is truncated: {got} of {state_len} state bytes")
    tail = await body.rest(tail_len)
    if digest.hexdigest() != state_sha:
        raise InvalidRequest("the snapshot is corrupt: its state does not match its checksum")
    signed = False
    if version == SIGNED_VERSION:
        if len(tail) != SIG_LEN or tail[: len(SIG_MAGIC)] != SIG_MAGIC:
            raise InvalidRequest("the snapshot is corrupt: its signature block is damaged")
        expected_sig = signature(snapshot_key(request), prefix + raw, state_sha)
        signed = hmac.compare_digest(tail[len(SIG_MAGIC) :], expected_sig)
    await asyncio.to_thread(spool.flush)
    return header, StateFile(path, preamble, state_len), signed


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

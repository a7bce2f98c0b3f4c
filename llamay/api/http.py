"""HTTP plumbing shared by every API: JSON bodies, SSE and NDJSON framing, streams that
drop stalled readers, client-disconnect watch, and `respond`: a generation through an
API's renderer as a streamed or a whole response."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Message, Send

from ..config import ServerLimits
from ..errors import InvalidRequest, LlamayError, PayloadTooLarge, RequestTimeout
from .serving import limits_of

if TYPE_CHECKING:
    from ..chat.pipeline import Choice, Delta, Done, Generation

__all__ = [
    "GuardedStream",
    "HttpRenderer",
    "respond",
    "ndjson_line",
    "ndjson_response",
    "read_body",
    "read_json",
    "stream_response",
    "SSE",
    "NDJSON",
    "sse_event",
    "until_disconnect",
    "json_response",
    "ClientGone",
]

T = TypeVar("T")
log = logging.getLogger("llamay.api")
MAX_BODY = ServerLimits().max_body  # the default; a server's own is its limits' `max_body`
# A client that stops sending its body, or stops reading a stream, for this long is
# dropped, and whatever it was generating is aborted (its KV freed).
IDLE_TIMEOUT = float(os.environ.get("LLAMAY_CLIENT_TIMEOUT", "30"))


class ClientGone(Exception):
    """The client disconnected before the answer was ready."""


async def read_body(
    request: Request, max_bytes: int | None = None, *, limits: ServerLimits | None = None
) -> bytes:
    """The raw body, refusing more than `max_bytes` (default: the server's `max_body`) with
    PayloadTooLarge, without reading it all. `limits`: the server's (default: the app's).
    RequestTimeout (408) when a chunk is IDLE_TIMEOUT late, or when the whole body has not
    arrived within the server's `body_timeout` (a client trickling a byte just before each
    idle timeout would otherwise hold the request forever)."""
    limits = limits or limits_of(request.scope.get("app"))
    if max_bytes is None:
        max_bytes = limits.max_body
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise PayloadTooLarge(f"the request body is larger than {max_bytes} bytes")
    total = limits.body_timeout
    deadline = asyncio.get_running_loop().time() + total
    chunks: list[bytes] = []
    size = 0
    stream = request.stream().__aiter__()
    while True:
        left = deadline - asyncio.get_running_loop().time()
        try:
            async with asyncio.timeout(min(IDLE_TIMEOUT, max(0.0, left))):
                chunk = await stream.__anext__()
        except StopAsyncIteration:
            break
        except TimeoutError:
            if left <= IDLE_TIMEOUT:
                raise RequestTimeout(f"the request body did not arrive within {total:g}s") from None
            raise RequestTimeout(f"the request body stalled for {IDLE_TIMEOUT:g}s") from None
        size += len(chunk)
        if size > max_bytes:
            raise PayloadTooLarge(f"the request body is larger than {max_bytes} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json(request: Request, max_bytes: int | None = None) -> Any:
    """The request body as JSON. Raises InvalidRequest (malformed JSON, named position) or
    PayloadTooLarge."""
    raw = await read_body(request, max_bytes)
    if len(raw) > INLINE_JSON:  # decoding megabytes is CPU work: off the event loop
        return await asyncio.to_thread(_decode_json, raw)
    return _decode_json(raw)


# Bodies up to this size are decoded on the event loop (cheaper than a thread hop).
INLINE_JSON = 64 * 1024


def _decode_json(raw: bytes) -> Any:
    if not raw.strip():
        raise InvalidRequest("the request body is empty; expected a JSON object")
    try:
        value = json.loads(raw)
    except UnicodeDecodeError:
        raise InvalidRequest("the request body is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise InvalidRequest(
            f"the request body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    if _SURROGATE_ESCAPE.search(raw):
        _refuse_lone_surrogates(value)
    return value


# A \uD800-\uDFFF escape: JSON allows a lone one, but it is no Unicode text and no model
# can tokenize it. Only bodies that contain one are walked.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _refuse_lone_surrogates(value: Any) -> None:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidRequest(
                    "the request body holds a lone UTF-16 surrogate (\\uD800-\\uDFFF)"
                ) from None
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(body, status_code=status, headers=headers)


def sse_event(event: dict[str, Any]) -> bytes:
    """`event: <type>` and `data: <json>` lines, as Anthropic and the Responses API frame
    every event."""
    data = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
    return f"event: {event['type']}\ndata: {data}\n\n".encode()


def ndjson_line(obj: Any) -> bytes:
    return (json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


class GuardedStream(StreamingResponse):
    """A streaming response that gives up on a client that stops reading: a send that
    waits IDLE_TIMEOUT ends the response and closes the event iterator, whose cleanup
    aborts the engine requests behind it (so a stalled reader never keeps KV). Starlette
    already cancels the iterator when the client disconnects."""

    async def stream_response(self, send: Send) -> None:
        # One watchdog per stream rather than a timer per send: a send costs two clock
        # reads, where a timeout scope per token was a tenth of the event loop's work.
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        since: float | None = None  # when the send now waiting began
        dropped = False
        dog: asyncio.TimerHandle

        def watch() -> None:
            # Looks every quarter timeout; a send found waiting is looked at again exactly
            # when its time is up, so the drop comes IDLE_TIMEOUT after the send began.
            nonlocal dog, dropped
            wait = IDLE_TIMEOUT / 4
            if since is not None:
                left = since + IDLE_TIMEOUT - loop.time()
                if left <= 0:
                    dropped = True
                    task.cancel()  # delivered inside the waiting send
                    return
                wait = min(wait, left)
            dog = loop.call_later(wait, watch)

        async def guarded(message: Message) -> None:
            nonlocal since
            since = loop.time()
            await send(message)
            since = None

        dog = loop.call_later(IDLE_TIMEOUT / 4, watch)
        try:
            await super().stream_response(guarded)
        except asyncio.CancelledError:
            if not dropped:
                raise
            task.uncancel()
            log.info("client stopped reading for %ss; stream dropped", IDLE_TIMEOUT)
        finally:
            dog.cancel()
            closer = getattr(self.body_iterator, "aclose", None)
            if closer is not None:
                await closer()


SSE = "text/event-stream"
NDJSON = "application/x-ndjson"


def stream_response(frames: AsyncIterable[bytes], media_type: str) -> StreamingResponse:
    """`frames` as a guarded stream of `media_type` (SSE or NDJSON), never buffered on the way."""
    return GuardedStream(
        frames, media_type=media_type, headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )


def ndjson_response(lines: AsyncIterator[bytes]) -> StreamingResponse:
    return stream_response(lines, NDJSON)


class HttpRenderer(Protocol):
    """An API's renderer (see chat/pipeline.py): frames of `media_type` (bytes) when
    `streaming`, else one frame at the end, the JSON body."""

    streaming: bool
    media_type: str

    def start(self, gen: Generation) -> Sequence[Any]: ...

    def delta(self, step: Delta) -> Sequence[Any]: ...

    def done(self, step: Done) -> Sequence[Any]: ...

    def error(self, exc: LlamayError) -> Sequence[Any]: ...


async def respond(
    request: Request,
    gen: Generation,
    renderer: HttpRenderer,
    *,
    settle: Callable[[Choice], Awaitable[None]] | None = None,
    cleanup: Callable[[], None] | None = None,
) -> Response:
    """`gen` through `renderer`: streamed (a client that disconnects or stops reading ends
    it, and the generation with it), or whole once the generation ends (cancelled if the
    client disconnects first). `settle` and `cleanup` as for the pipeline's `Frames`."""
    # Imported here: the rest of this module serves routes that never load the engine.
    from ..chat.pipeline import Frames, answer

    if renderer.streaming:
        return stream_response(Frames(gen, renderer, settle=settle, cleanup=cleanup), renderer.media_type)
    try:
        body = await until_disconnect(request, answer(gen, renderer, settle=settle))
    finally:
        if cleanup is not None:
            cleanup()
    return json_response(body)


async def until_disconnect(request: Request, work: Awaitable[T]) -> T:
    """Run `work`, cancelling it if the client disconnects first (then raise ClientGone)."""
    task = asyncio.ensure_future(work)

    async def watch() -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                return

    watcher = asyncio.ensure_future(watch())
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        raise ClientGone()
    finally:
        watcher.cancel()

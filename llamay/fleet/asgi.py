"""Run one HTTP request through an ASGI app in process and hand back its response as it is
produced: a `Head` first, then body chunks, unbuffered. A replica uses this to serve what the
ingress forwards, so every API stays in the one llamay app."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from ..chat.journal import JOURNAL, Journal

__all__ = ["Forwarded", "Head", "Lifespan", "call_asgi"]


@dataclass(frozen=True)
class Forwarded:
    """An HTTP request as the ingress received it. Headers keep their order and repeats."""

    method: str
    path: str
    query: bytes = b""
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes = b""
    client: tuple[str, int] | None = None


@dataclass(frozen=True)
class Head:
    """The response's status and headers, with the body the app had already sent when they
    were read. `done`: that is the whole body, and nothing follows. A reply produced in one
    go (any non-streaming JSON answer) thus crosses from replica to ingress as one item,
    rather than three (head, body, end), each a message between the two processes."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes = b""
    done: bool = False


async def call_asgi(
    app: Any,
    req: Forwarded,
    extra_headers: tuple[tuple[bytes, bytes], ...] = (),
    journal: Journal | None = None,
) -> AsyncIterator[Head | bytes]:
    """Yield the response's `Head` (carrying whatever body the app had already sent, and
    whether that is all of it), then each further non-empty body chunk as the app sends it.

    Contract: the body is given to the app in one `http.request` message; if the consumer
    stops iterating (the caller went away), the app sees `http.disconnect` and its task is
    cancelled, so a generation it started is aborted, as with a direct client. `journal`
    is the request's (`chat.journal`): its answer waits until what it changed is durable."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": req.method,
        "scheme": "http",
        "path": req.path,
        "raw_path": req.path.encode(),
        "query_string": req.query,
        "root_path": "",
        "headers": list(req.headers),
        "client": req.client or ("127.0.0.1", 0),
        "server": ("127.0.0.1", 0),
        "state": {},
    }
    out: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
    gone = asyncio.Event()
    sent_body = False

    async def receive() -> dict[str, Any]:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": req.body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        await out.put(message)

    async def run() -> None:
        JOURNAL.set(journal)  # this task's own copy of the context: nothing leaks out
        try:
            await app(scope, receive, send)
        finally:
            await out.put(None)

    task = asyncio.create_task(run())
    try:
        while True:
            msg = await out.get()
            if msg is None:
                break
            if msg["type"] == "http.response.start":
                headers = [(bytes(k), bytes(v)) for k, v in msg.get("headers", [])]
                body, done = _ready_body(out)
                yield Head(int(msg["status"]), headers + list(extra_headers), body, done)
                if done:
                    break
            elif msg["type"] == "http.response.body":
                chunk = msg.get("body", b"")
                if chunk:
                    yield bytes(chunk)
                if not msg.get("more_body", False):
                    break
        # An app that failed has already answered 500 (Starlette's error middleware) or sent
        # nothing, which the caller sees as no Head; either way its exception stops here.
        with contextlib.suppress(Exception):
            await task
    finally:
        gone.set()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _ready_body(out: asyncio.Queue[dict[str, Any] | None]) -> tuple[bytes, bool]:
    """The body messages already queued, joined, and whether the last one ended the body.
    Only messages that are waiting are taken (never waits), so a stream's first chunk is
    never held back for more."""
    parts: list[bytes] = []
    while not out.empty():
        msg = out.get_nowait()
        if msg is None:  # the app ended without finishing its body: the caller sees the end
            out.put_nowait(None)
            break
        if msg["type"] != "http.response.body":
            continue
        parts.append(bytes(msg.get("body", b"")))
        if not msg.get("more_body", False):
            return b"".join(parts), True
    return b"".join(parts), False


class Lifespan:
    """Drive an ASGI app's lifespan (startup, then shutdown on `stop`) without a server."""

    def __init__(self, app: Any) -> None:
        self._app = app
        self._inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._started = asyncio.Event()
        self._stopped = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        async def send(message: dict[str, Any]) -> None:
            if message["type"].startswith("lifespan.startup"):
                self._started.set()
            elif message["type"].startswith("lifespan.shutdown"):
                self._stopped.set()

        async def run() -> None:
            try:
                await self._app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}},
                                self._inbox.get, send)  # fmt: skip
            finally:
                self._started.set()
                self._stopped.set()

        self._task = asyncio.create_task(run())
        await self._inbox.put({"type": "lifespan.startup"})
        await self._started.wait()

    async def stop(self) -> None:
        if self._task is None:
            return
        await self._inbox.put({"type": "lifespan.shutdown"})
        await self._stopped.wait()
        with contextlib.suppress(Exception):
            await self._task
        self._task = None

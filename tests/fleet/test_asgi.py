"""`call_asgi` without Ray: a reply the app sends in one go crosses as one `Head`; a stream's
chunks come one by one, as produced."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from llamay.fleet.asgi import Forwarded, Head, call_asgi

gate = asyncio.Event()


async def whole(request: Request) -> JSONResponse:
    return JSONResponse({"echo": (await request.body()).decode()})


async def stream(request: Request) -> StreamingResponse:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"first "
        await gate.wait()  # the second chunk exists only once the first was received
        yield b"second"

    return StreamingResponse(chunks(), media_type="text/event-stream")


APP = Starlette(routes=[Route("/whole", whole, methods=["POST"]), Route("/stream", stream)])


def test_a_whole_reply_comes_with_its_head() -> None:
    async def go() -> list[Head | bytes]:
        return [x async for x in call_asgi(APP, Forwarded("POST", "/whole", body=b"hi"), ((b"x-r", b"1"),))]

    (head,) = asyncio.run(go())
    assert isinstance(head, Head) and head.status == 200 and head.done
    assert head.body == b'{"echo":"hi"}' and (b"x-r", b"1") in head.headers


def test_a_stream_is_passed_on_as_produced() -> None:
    async def go() -> list[Head | bytes]:
        gate.clear()
        got: list[Head | bytes] = []
        async for item in call_asgi(APP, Forwarded("GET", "/stream")):
            got.append(item)
            if b"first " in (item.body if isinstance(item, Head) else item):
                gate.set()
        return got

    head, *rest = asyncio.run(go())
    assert isinstance(head, Head) and not head.done
    assert head.body + b"".join(x for x in rest if isinstance(x, bytes)) == b"first second"
    assert b"second" not in head.body

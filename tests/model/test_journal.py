"""The journal contract (`chat/journal.py`) on a real server app and the tiny model, as a
fleet replica calls it: every change to a context (create, session turn, fork, restore,
delete) is handed to the request's journal before the answer says it happened, a streamed
turn's closing frames wait for it, and a journal that fails turns the answer into a 503."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from llamay.chat.journal import Journal
from llamay.config import RuntimeConfig, ServerConfig
from llamay.errors import Overloaded
from llamay.fleet.asgi import Forwarded, Head, Lifespan, call_asgi
from llamay.server import build_server

JSON = [(b"content-type", b"application/json")]
SYSTEM = {"role": "system", "content": "You answer tickets."}


async def call(app: object, method: str, path: str, body: object = None, journal: Journal | None = None,
               raw: bytes | None = None) -> tuple[int, bytes]:  # fmt: skip
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else b"")
    status, out = 0, b""
    path, _, query = path.partition("?")
    fwd = Forwarded(method, path, query=query.encode(), headers=JSON, body=data)
    async for item in call_asgi(app, fwd, journal=journal):
        if isinstance(item, Head):
            status, out = item.status, item.body
        else:
            out += item
    return status, out


def run_with_app(tiny_model_path: Path, tmp_path: Path, go: Callable[[object], Awaitable[None]]) -> None:
    config = ServerConfig(
        model=str(tiny_model_path), runtime=RuntimeConfig(ctx=1024, threads=1, concurrency=2, home=tmp_path)
    )

    async def main() -> None:
        app = build_server(config)
        life = Lifespan(app)
        await life.start()
        try:
            await go(app)
        finally:
            await life.stop()

    asyncio.run(main())


def test_every_context_change_reaches_the_journal_before_its_answer(tiny_model_path: Path, tmp_path: Path) -> None:
    async def go(app: object) -> None:
        seen: list[str] = []

        async def journal(cid: str) -> None:
            seen.append(cid)

        status, body = await call(app, "POST", "/v1/contexts", {"messages": [SYSTEM]}, journal)
        assert status == 200, body
        cid = json.loads(body)["id"]
        assert seen == [cid]
        turn = {"messages": [SYSTEM, {"role": "user", "content": "hi"}], "max_tokens": 3, "llamay_session": cid}
        status, body = await call(app, "POST", "/v1/chat/completions", turn, journal)
        assert status == 200, body
        assert seen == [cid, cid]
        status, body = await call(app, "POST", f"/v1/contexts/{cid}/fork?n=2", None, journal)
        assert status == 200, body
        forks = [d["id"] for d in json.loads(body)["data"]]
        assert seen[2:] == forks and len(forks) == 2
        status, snap = await call(app, "GET", f"/v1/contexts/{cid}/snapshot", None, journal)
        assert status == 200 and seen[4:] == []  # reading changes nothing
        status, body = await call(app, "POST", "/v1/contexts/restore", journal=journal, raw=snap)
        assert status == 200, body
        assert seen[4:] == [json.loads(body)["id"]]
        status, _ = await call(app, "DELETE", f"/v1/contexts/{forks[0]}", None, journal)
        assert status == 200 and seen[5:] == [forks[0]]
        # A plain request changes no context: nothing is journaled.
        status, _ = await call(app, "POST", "/v1/chat/completions",
                               {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2}, journal)  # fmt: skip
        assert status == 200 and len(seen) == 6

    run_with_app(tiny_model_path, tmp_path, go)


def test_a_streamed_turn_closes_only_once_journaled(tiny_model_path: Path, tmp_path: Path) -> None:
    async def go(app: object) -> None:
        status, body = await call(app, "POST", "/v1/contexts", {"messages": [SYSTEM]})
        cid = json.loads(body)["id"]
        called, release = asyncio.Event(), asyncio.Event()

        async def slow(c: str) -> None:
            called.set()
            await release.wait()

        turn = {"messages": [SYSTEM, {"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True,
                "llamay_session": cid, "temperature": 0}  # fmt: skip
        got: list[bytes] = []

        async def consume() -> None:
            async for item in call_asgi(app, Forwarded("POST", "/v1/chat/completions", headers=JSON,
                                                       body=json.dumps(turn).encode()), journal=slow):  # fmt: skip
                got.append(item.body if isinstance(item, Head) else item)

        task = asyncio.create_task(consume())
        await asyncio.wait_for(called.wait(), 60)
        await asyncio.sleep(0.2)  # whatever the app would send without waiting has been sent
        so_far = b"".join(got)
        assert b"[DONE]" not in so_far and b'"finish_reason":"' not in so_far.replace(b" ", b"")
        release.set()
        await asyncio.wait_for(task, 60)
        whole = b"".join(got)
        assert whole.rstrip().endswith(b"data: [DONE]") and b'"finish_reason":' in whole

    run_with_app(tiny_model_path, tmp_path, go)


@pytest.mark.parametrize("stream", [False, True])
def test_a_failing_journal_fails_the_answer(tiny_model_path: Path, tmp_path: Path, stream: bool) -> None:
    async def go(app: object) -> None:
        status, body = await call(app, "POST", "/v1/contexts", {"messages": [SYSTEM]})
        cid = json.loads(body)["id"]

        async def broken(c: str) -> None:
            raise Overloaded("the state directory is full; retry")

        turn = {"messages": [SYSTEM, {"role": "user", "content": "hi"}], "max_tokens": 3, "stream": stream,
                "llamay_session": cid}  # fmt: skip
        status, body = await call(app, "POST", "/v1/chat/completions", turn, broken)
        if stream:  # the head went out with the first frame: the stream ends in an error frame
            assert status == 200 and b'"error"' in body and b"state directory is full" in body
            assert b"[DONE]" not in body
        else:
            assert status == 503 and b"state directory is full" in body
        status, body = await call(app, "POST", "/v1/contexts", {"messages": [SYSTEM]}, broken)
        assert status == 503, body

    run_with_app(tiny_model_path, tmp_path, go)

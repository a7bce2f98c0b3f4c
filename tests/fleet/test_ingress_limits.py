"""The fleet ingress as a hostile client meets it, without Ray: the real `LlamayIngress`
listening on 127.0.0.1 through its own `serve_http` (uvicorn with `serve`'s limits), its
replicas a stand-in that answers through `call_asgi` with an app echoing what it got. A
request without a key is refused before its body is read, a body over the limit is a 413
and a trickled one a 408 (each in the shape of the API called), large bodies are parsed in
a worker thread, and another tenant's request through the same ingress is answered
unchanged meanwhile. Assertions are about outcomes, never about elapsed time."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import contextlib
import json
import select
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llamay.config import ServerConfig, ServerLimits
from llamay.fleet import ingress as ingress_module
from llamay.fleet.asgi import Forwarded, Head, call_asgi
from llamay.fleet.hints import RouteHint, read_hint
from llamay.fleet.ingress import HintReader, LlamayIngress
from llamay.fleet.spec import FleetSpec
from llamay.testing.server import free_port

ANN = {"Authorization": "Bearer ann-key"}
BOB = {"Authorization": "Bearer bob-key"}
MAX_BODY = 1 << 20


async def echo(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The replicas' stand-in app: how many body bytes it was given, and on which path."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    out = json.dumps({"path": scope["path"], "bytes": len(body)}).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": out})


class Replicas:
    """What the ingress calls on Ray's handle: `options(stream=True).handle.remote(hint, req)`."""

    def __init__(self) -> None:
        self.handle = self

    def options(self, **_: Any) -> Replicas:
        return self

    def remote(self, hint: RouteHint, req: Forwarded) -> Stream:
        return Stream(call_asgi(echo, req))


class Stream:
    def __init__(self, items: AsyncIterator[Head | bytes]) -> None:
        self.items = items

    def __aiter__(self) -> Stream:
        return self

    async def __anext__(self) -> Head | bytes:
        return await self.items.__anext__()

    def cancel(self) -> None:
        pass


class Running:
    def __init__(self, base: str, loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
        self.base, self.loop, self.thread = base, loop, thread
        self.host, port = base.removeprefix("http://").split(":")
        self.port = int(port)


@pytest.fixture(scope="module")
def ingress(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    keys = tmp_path_factory.mktemp("ingress") / "keys.json"
    keys.write_text(json.dumps({"keys": [{"key": "ann-key", "principal": "ann"},
                                         {"key": "bob-key", "principal": "bob"}]}))  # fmt: skip
    limits = ServerLimits(max_body=MAX_BODY, body_timeout=2.0, header_timeout=2.0)
    port = free_port()
    spec = FleetSpec(("tiny", "/absent.gguf", None), ServerConfig(keys=keys, limits=limits), port=port)
    app = LlamayIngress(Replicas(), spec)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(app.serve_http(), loop).result(30)
    running = Running(f"http://127.0.0.1:{port}", loop, thread)
    deadline = time.monotonic() + 30
    while True:  # until uvicorn, started in the loop, answers
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(running.base + "/health", timeout=2).status_code == 200:
                break
        assert time.monotonic() < deadline, "the ingress did not start listening"
        time.sleep(0.05)
    try:
        yield running
    finally:
        task = app._http
        if task is not None:
            loop.call_soon_threadsafe(task.cancel)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)


def victim(s: Running) -> None:
    """bob's small request, answered as ever."""
    body = b'{"messages":[]}'
    r = httpx.post(s.base + "/v1/chat/completions", headers=BOB, content=body, timeout=30)
    assert r.status_code == 200 and r.json() == {"path": "/v1/chat/completions", "bytes": len(body)}, r.text


def raw(s: Running, head: bytes, body: bytes = b"") -> bytes:
    """Send `head` and `body` on one connection (declaring more than that, maybe) and return
    what the ingress answers, without sending anything more."""
    with socket.create_connection((s.host, s.port), timeout=30) as sock:
        sock.sendall(head + body)
        reply = b""
        while b"\r\n\r\n" not in reply or not reply_complete(reply):
            got = sock.recv(65536)
            if not got:
                break
            reply += got
        return reply


def reply_complete(reply: bytes) -> bool:
    head, _, body = reply.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return False


def body_of(reply: bytes) -> Any:
    return json.loads(reply.partition(b"\r\n\r\n")[2])


def test_no_key_is_refused_before_the_body_is_read(ingress: Running) -> None:
    """A gigabyte is declared and ten bytes sent: the 401 comes without the rest."""
    for path, shape in (("/v1/chat/completions", "openai"), ("/api/chat", "ollama"), ("/v1/messages", "anthropic")):
        head = f"POST {path} HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ncontent-length: {1 << 30}\r\n\r\n"
        reply = raw(ingress, head.encode(), b'{"model":"')
        assert reply.startswith(b"HTTP/1.1 401"), reply[:200]
        err = body_of(reply)
        if shape == "ollama":
            assert "API key" in err["error"]
        elif shape == "anthropic":
            assert err["type"] == "error" and err["error"]["type"] == "authentication_error"
        else:
            assert err["error"]["type"] == "authentication_error" and "API key" in err["error"]["message"]
    victim(ingress)


def test_a_body_over_the_limit_is_a_413_in_the_callers_shape(ingress: Running) -> None:
    head = (f"POST /v1/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ann-key\r\n"
            f"content-length: {MAX_BODY + 1}\r\n\r\n").encode()  # fmt: skip
    reply = raw(ingress, head)
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert body_of(reply)["error"] == {"type": "request_too_large", "message": f"the request body is larger than {MAX_BODY} bytes"}

    def chunks() -> Iterator[bytes]:  # no length declared: counted as it comes
        for _ in range(3):
            yield b" " * (MAX_BODY // 2)

    r = httpx.post(ingress.base + "/api/chat", headers=ANN, content=chunks(), timeout=30)
    assert r.status_code == 413 and r.json() == {"error": f"the request body is larger than {MAX_BODY} bytes"}
    r = httpx.post(ingress.base + "/v1/completions", headers=ANN, content=b" " * MAX_BODY, timeout=30)
    assert r.status_code == 200 and r.json()["bytes"] == MAX_BODY  # the limit itself is fine
    victim(ingress)


def trickle(s: Running, head: bytes, drip: bytes) -> bytes:
    """`head`, then `drip` a byte every half second until the ingress answers (what it said)
    or the drip runs out (b"")."""
    with socket.create_connection((s.host, s.port), timeout=30) as sock:
        sock.sendall(head)
        for byte in drip:
            if select.select([sock], [], [], 0.5)[0]:
                reply = b""
                while (got := sock.recv(4096)) and not reply_complete(reply + got):
                    reply += got
                return reply + got
            sock.sendall(bytes([byte]))
    return b""


def test_a_trickled_body_is_cut_off_whole(ingress: Running) -> None:
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ann-key\r\n"
            b"content-length: 60\r\n\r\n")  # fmt: skip
    with cf.ThreadPoolExecutor(1) as pool:
        attack = pool.submit(trickle, ingress, head, b"{" + b" " * 59)  # 30 s at this pace
        victim(ingress)
        reply = attack.result()
    assert reply.startswith(b"HTTP/1.1 408"), reply
    assert body_of(reply)["error"]["message"] == "the request body did not arrive within 2s"
    victim(ingress)


def test_large_bodies_are_parsed_off_the_event_loop(ingress: Running, monkeypatch: pytest.MonkeyPatch) -> None:
    """A small body's hint is read in place, a large one's in a worker thread."""
    threads: list[int] = []
    real = ingress_module.read_hint

    def spy(*args: Any) -> RouteHint:
        threads.append(threading.get_ident())
        return real(*args)

    monkeypatch.setattr(ingress_module, "read_hint", spy)
    big = {"model": "m", "messages": [{"role": "user", "content": "x" * 500_000}]}
    for body in ({"model": "m", "messages": []}, big):
        r = httpx.post(ingress.base + "/v1/chat/completions", headers=ANN, json=body, timeout=30)
        assert r.status_code == 200, r.text
    small, large = threads
    assert small == ingress.thread.ident  # a small body is parsed in place
    assert large != ingress.thread.ident  # a large one in a worker thread
    victim(ingress)


def test_a_large_body_gives_the_same_hint_and_its_session_is_rewritten() -> None:
    body = json.dumps({"model": "m2", "llamay_session": "ctx_a", "pad": "y" * 200_000,
                       "messages": [{"role": "user", "content": "hello " * 40_000}]}).encode()  # fmt: skip
    plain = {"model": "m3", "messages": [{"role": "user", "content": "z" * 100_000}]}
    reader = HintReader()

    async def go() -> tuple[RouteHint, RouteHint, tuple[str, bytes]]:
        session = await reader.hint("POST", "/v1/chat/completions", {}, body)
        prompt = await reader.hint("POST", "/v1/chat/completions", {}, json.dumps(plain).encode())
        return session, prompt, await reader.rewrite("/v1/chat/completions", body, session, "ctx_b")

    session, prompt, (path, rewritten) = asyncio.run(go())
    assert session == read_hint("POST", "/v1/chat/completions", {}, body)
    assert session.context == "ctx_a" and session.model == "m2"
    assert prompt.prefix == read_hint("POST", "/v1/chat/completions", {}, json.dumps(plain).encode()).prefix
    assert len(prompt.prefix) == 512  # 64 KiB of prompt hashed, the rest left out
    assert path == "/v1/chat/completions" and json.loads(rewritten) == {**json.loads(body), "llamay_session": "ctx_b"}


def test_the_ingress_keys_and_limits_come_from_the_server_config(tmp_path: Path) -> None:
    spec = FleetSpec(("tiny", "/absent.gguf", None), ServerConfig(limits=ServerLimits(max_body=123)))
    app = LlamayIngress(Replicas(), spec)
    assert app.limits.max_body == 123 and not app.keys.enabled

"""Hostile tenants against a real server with two user keys (ann, bob) and an admin key:
each attack is refused or harmless, and the victim's concurrent request finishes
unchanged. Assertions are about outcomes and order, never about elapsed time."""

from __future__ import annotations

import concurrent.futures as cf
import json
import select
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.serverproc import ServerProc, start_server

ANN = {"Authorization": "Bearer ann-key"}
BOB = {"Authorization": "Bearer bob-key"}
ADMIN = {"Authorization": "Bearer root-key"}
GREEDY = {"temperature": 0, "seed": 0}


def write_keys(path: Path) -> Path:
    path.write_text(json.dumps({"keys": [
        {"key": "ann-key", "principal": "ann", "role": "user"},
        {"key": "bob-key", "principal": "bob", "role": "user"},
        {"key": "root-key", "principal": "root", "role": "admin"},
    ]}))  # fmt: skip
    return path


@pytest.fixture(scope="module")
def server(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    home = tmp_path_factory.mktemp("tenants")
    keys = write_keys(home / "keys.json")
    args = ["-ctx", "4096", "-keys", str(keys), "-body-timeout", "3s", "-header-timeout", "2s"]
    with start_server(tiny_model_path, *args, home=home / "h", env={"LLAMAY_CLIENT_TIMEOUT": "2"}) as s:
        yield s


def address(s: ServerProc) -> tuple[str, int]:
    host, port = s.base.removeprefix("http://").split(":")
    return host, int(port)


def victim_chat(s: ServerProc, model: str = "tiny-llama") -> dict[str, Any]:
    """bob's ordinary request; its greedy answer must not change whatever ann does."""
    r = httpx.post(s.base + "/api/chat", headers=BOB, timeout=120, json={
        "model": model, "stream": False, "options": {**GREEDY, "num_predict": 12},
        "messages": [{"role": "user", "content": "Say something about the sea."}],
    })  # fmt: skip
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def trickle(s: ServerProc, head: bytes, drip: bytes) -> tuple[bytes, int]:
    """Send `head`, then `drip` one byte at a time (each well inside the per-chunk timeout)
    until the server answers or closes. Returns what it said and how many bytes were dripped."""
    with socket.create_connection(address(s)) as sock:
        sock.sendall(head)
        for sent, byte in enumerate(drip):
            readable, _, _ = select.select([sock], [], [], 0.5)
            if readable:
                reply = b""
                while True:
                    got = sock.recv(4096)
                    if not got:
                        return reply, sent
                    reply += got
                    if b"\r\n\r\n" in reply and not select.select([sock], [], [], 0.5)[0]:
                        return reply, sent
            try:
                sock.sendall(bytes([byte]))
            except OSError:  # closed by the server
                return b"", sent
    return b"", len(drip)


# -- slow clients -----------------------------------------------------------------------


def test_a_body_trickled_below_the_idle_timeout_is_cut_off_whole(server: ServerProc) -> None:
    """One byte every half second never trips the 2 s idle timeout; the 3 s total deadline
    cuts it off with a 408 long before the 200 declared bytes are in."""
    head = (b"POST /api/chat HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ann-key\r\n"
            b"content-type: application/json\r\ncontent-length: 200\r\n\r\n")  # fmt: skip
    with cf.ThreadPoolExecutor(1) as pool:
        attack = pool.submit(trickle, server, head, b"{" + b" " * 199)
        before = victim_chat(server)
        reply, sent = attack.result()
    assert reply.startswith(b"HTTP/1.1 408"), reply
    assert b"did not arrive within 3s" in reply
    assert sent < 200
    assert victim_chat(server)["message"] == before["message"]


def test_headers_sent_a_byte_at_a_time_are_dropped(server: ServerProc) -> None:
    drip = b"X-Slow: " + b"a" * 400 + b"\r\n\r\n"
    with cf.ThreadPoolExecutor(1) as pool:
        attack = pool.submit(trickle, server, b"GET /health HTTP/1.1\r\nHost: x\r\n", drip)
        assert httpx.get(server.base + "/health").status_code == 200
        reply, sent = attack.result()
    assert reply == b"" and sent < len(drip)  # closed before the headers were complete
    assert httpx.get(server.base + "/health").status_code == 200


def test_a_stalled_ndjson_reader_is_dropped_and_its_kv_freed(server: ServerProc) -> None:
    body = json.dumps({
        "model": "tiny-llama", "prompt": "hi", "stream": True, "logprobs": True, "top_logprobs": 20,
        "options": {"num_predict": 3000},
    }).encode()  # fmt: skip
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting, so it holds
    sock.connect(address(server))
    sock.sendall(b"POST /api/generate HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ann-key\r\n"
                 b"content-type: application/json\r\ncontent-length: " + str(len(body)).encode()
                 + b"\r\n\r\n" + body)  # fmt: skip
    try:
        assert sock.recv(1024).startswith(b"HTTP/1.1 200")  # started; now read nothing more
        before = victim_chat(server)  # served while the stalled stream is still generating
        health: dict[str, Any] = {}
        for _ in range(2400):  # until the engine has aborted it (or the 3000 tokens are done)
            health = httpx.get(server.base + "/health").json()["models"][0]
            if health["aborted"] >= 1 and health["running"] == 0:
                break
            select.select([], [], [], 0.25)
        assert health["aborted"] >= 1 and health["running"] == 0, server.log()[-2000:]
        assert victim_chat(server)["message"] == before["message"]
    finally:
        sock.close()

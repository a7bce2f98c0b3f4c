"""Hostile tenants against a real server with two user keys (ann, bob) and an admin key:
each attack is refused or harmless, and the victim's concurrent request finishes
unchanged. Assertions are about outcomes and order, never about elapsed time."""

from __future__ import annotations

import concurrent.futures as cf
import json
import select
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llamay.api.http import GuardedStream
from llamay.api.ollama.common import ndjson_response as ollama_ndjson
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
    args = ["-ctx", "16384", "-keys", str(keys), "-body-timeout", "3s", "-header-timeout", "2s"]
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
    async def lines() -> AsyncIterator[bytes]:
        yield b"{}\n"

    assert isinstance(ollama_ndjson(lines()), GuardedStream)  # the guard every stream type has
    body = json.dumps({
        "model": "tiny-llama", "prompt": "hi", "stream": True, "logprobs": True, "top_logprobs": 20,
        "options": {"num_predict": 16000},  # ~24 MB of lines, generated for longer than the 2 s stall limit
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
        while True:  # until the stream is over: aborted (the fix) or generated to the end
            health = httpx.get(server.base + "/health", headers=ADMIN).json()["models"][0]
            if health["running"] == 0:
                break
            select.select([], [], [], 0.25)
        assert health["aborted"] >= 1 and health["running"] == 0, server.log()[-2000:]
        assert victim_chat(server)["message"] == before["message"]
    finally:
        sock.close()


# -- nothing heavy on the event loop ------------------------------------------------------


def in_order(*calls: Any) -> list[int]:
    """Run the calls at once (each started only after the previous one is sent); returns
    the indices in the order their responses came back."""
    order: list[int] = []

    def run(i: int) -> None:
        calls[i]()
        order.append(i)

    with cf.ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(run, i) for i in range(len(calls))]
        for f in futures:
            f.result()
    return order


def test_a_hostile_keep_alive_is_refused_and_health_answers(server: ServerProc) -> None:
    before = victim_chat(server)
    statuses: list[int] = []

    def attack() -> None:
        for path, extra in (("/api/chat", {"messages": []}), ("/api/generate", {"prompt": ""}),
                            ("/api/load", {})):  # fmt: skip
            for text in ("1" * 5000 + "x", "." * 5000, "1." * 2500 + "x", " " * 5000 + "1"):
                r = httpx.post(server.base + path, headers=ANN, timeout=60,
                               json={"model": "tiny-llama", "keep_alive": text, **extra})  # fmt: skip
                statuses.append(r.status_code)
                assert "keep_alive" in r.json()["error"]

    in_order(attack, lambda: httpx.get(server.base + "/health").raise_for_status())
    assert set(statuses) == {400}
    assert victim_chat(server)["message"] == before["message"]


def test_redacting_a_large_text_does_not_hold_up_other_routes(server: ServerProc) -> None:
    text = "1/1/1/1/1 a@a@a@ a:a:a: " * 4_000  # ~100 KB of the detectors' worst shapes
    results: dict[str, int] = {}

    def redact() -> None:
        r = httpx.post(server.base + "/v1/redact", headers=ANN, json={"text": text}, timeout=600)
        results["redact"] = r.status_code

    def health() -> None:
        results["health"] = httpx.get(server.base + "/health", timeout=600).status_code

    order = in_order(redact, health)
    assert results == {"redact": 200, "health": 200}
    assert order == [1, 0]  # /health came back while the redaction was still running


def test_the_go_template_field_is_linear_and_capped(server: ServerProc) -> None:
    for template in ("{" * 200_000, "{{ " * 100_000, "{{ .Prompt }}" * 100_000):
        r = httpx.post(server.base + "/api/generate", headers=ANN, timeout=120, json={
            "model": "tiny-llama", "prompt": "x" * 1000, "template": template, "stream": False,
            "options": {"num_predict": 1},
        })  # fmt: skip
        # Too long for the context, or past the output cap: a 400 either way, quickly.
        assert r.status_code == 400, r.text
    assert "renders to more than" in r.json()["error"]
    assert httpx.get(server.base + "/health").status_code == 200


# -- unbounded growth ---------------------------------------------------------------------


def test_metrics_do_not_grow_with_invented_methods(server: ServerProc) -> None:
    unusual = ["PROPFIND", "MKCOL", "LOCK", "UNLOCK", "PURGE", "REPORT", "SEARCH", "NOTIFY", "LINK", "UNLINK"]
    for method in unusual:  # methods the HTTP parser takes; each reaches the app unauthenticated
        r = httpx.request(method, server.base + "/v1/chat/completions")
        assert r.status_code in (401, 405)
    stats = httpx.get(server.base + "/v1/stats", headers=ADMIN).json()
    methods = {r["method"] for r in stats["requests"]}
    assert methods <= {"GET", "POST", "OTHER"} and "OTHER" in methods, methods


def test_input_arrays_are_capped(server: ServerProc) -> None:
    r = httpx.post(server.base + "/v1/completions", headers=ANN,
                   json={"model": "tiny-llama", "prompt": ["a"] * 65, "max_tokens": 1})  # fmt: skip
    assert r.status_code == 400 and "at most 64" in r.json()["error"]["message"]
    r = httpx.post(server.base + "/api/embed", headers=ANN, json={"model": "x", "input": ["a"] * 2049})
    assert r.status_code == 400 and "at most 2048" in r.json()["error"]
    r = httpx.post(server.base + "/v1/embeddings", headers=ANN, json={"model": "x", "input": ["a"] * 2049})
    assert r.status_code == 400 and "at most 2048" in r.json()["error"]["message"]


# -- model management is the admin's -------------------------------------------------------


def ps(s: ServerProc) -> dict[str, bool]:
    """Loaded models, each with whether it is kept without expiry (Ollama reports that as
    an expiry centuries ahead)."""
    models = httpx.get(s.base + "/api/ps", headers=ADMIN).json()["models"]
    return {m["name"]: int(m["expires_at"][:4]) > 2200 for m in models}


def test_a_user_neither_unloads_nor_retimes_the_shared_model(server: ServerProc) -> None:
    reference = victim_chat(server)
    kept = ps(server)
    assert kept == {"tiny-llama": True}
    answers: list[dict[str, Any]] = []
    refusals: list[httpx.Response] = []

    def victim() -> None:
        answers.append(victim_chat(server))

    def attack() -> None:
        for path, empty in (("/api/chat", {"messages": []}), ("/api/generate", {"prompt": ""})):
            refusals.append(httpx.post(server.base + path, headers=ANN,
                                       json={"model": "tiny-llama", "keep_alive": 0, **empty}))  # fmt: skip
        refusals.append(httpx.post(server.base + "/api/unload", headers=ANN, json={"model": "tiny-llama"}))
        # keep_alive on an ordinary request is ignored for a user key
        r = httpx.post(server.base + "/api/generate", headers=ANN, timeout=120, json={
            "model": "tiny-llama", "prompt": "hi", "keep_alive": "1s", "stream": False,
            "options": {"num_predict": 2},
        })  # fmt: skip
        assert r.status_code == 200, r.text

    in_order(victim, attack)
    assert [r.status_code for r in refusals] == [403, 403, 403]
    assert "admin" in refusals[0].json()["error"]
    assert answers[0]["message"] == reference["message"] and answers[0]["done_reason"] != "abort"
    assert ps(server) == kept  # still loaded, still without expiry


def test_the_model_field_is_not_a_path_for_users(server: ServerProc, tiny_model_path: Path) -> None:
    probes = ["/etc/passwd", "/nonexistent/m.gguf", str(tiny_model_path), "../../../etc/passwd",
              "smollm2:135m", "hf:org/repo/m.gguf", "https://example.invalid/m.gguf", "x" * 5000]  # fmt: skip
    for name in probes:
        shown = name[:200]
        r = httpx.post(server.base + "/api/chat", headers=ANN, timeout=60, json={
            "model": name, "stream": False, "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
        assert (r.status_code, r.json()) == (404, {"error": f"model '{shown}' not found"}), name
        r = httpx.post(server.base + "/v1/chat/completions", headers=BOB, timeout=60,
                       json={"model": name, "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
        assert r.status_code == 404 and r.json()["error"]["message"] == f"model '{shown}' not found", name
    # The admin may load by path; a file that is no GGUF is a 404 too, not a 500.
    r = httpx.post(server.base + "/api/load", headers=ADMIN, json={"model": "/etc/passwd"})
    assert r.status_code == 404 and "not a GGUF file" in r.json()["error"]


def test_the_admin_retimes_and_the_default_model_comes_back_by_name(server: ServerProc) -> None:
    before = victim_chat(server)
    r = httpx.post(
        server.base + "/api/load", headers=ADMIN, json={"model": "tiny-llama", "keep_alive": "10m"}
    )
    assert r.status_code == 200
    assert ps(server) == {"tiny-llama": False}  # an expiry now
    r = httpx.post(server.base + "/api/unload", headers=ADMIN, json={"model": "tiny-llama"})
    assert r.json() == {"status": "success", "unloaded": True}
    assert ps(server) == {}
    # A user names it again: the model started from a file comes back under its name.
    assert victim_chat(server)["message"] == before["message"]
    assert "tiny-llama" in ps(server)

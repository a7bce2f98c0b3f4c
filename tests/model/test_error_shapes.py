"""Every API answers its errors in its own shape, whatever the status: a route that does
not exist (404), a method a route does not take (405), a body too large (413) and a
failure inside the server (500), against a real server process. OpenAI's clients read
`{"error": {...}}`, Anthropic's `{"type": "error", "error": {...}}` (with a request id),
Ollama's `{"error": "..."}`.

The 500 is a real one: the request names a model file that starts like a GGUF but that
llama.cpp cannot load, which the server reports as an internal error."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest

from llamay.api.http import MAX_BODY
from tests.serverproc import ServerProc, start_server

ASK = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def server(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    with start_server(tiny_model_path, home=tmp_path_factory.mktemp("error-shapes")) as s:
        yield s


@pytest.fixture(scope="module")
def broken_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("broken") / "broken.gguf"
    path.write_bytes(b"GGUF" + b"\x00" * 60)  # the magic, then no version llama.cpp reads
    return str(path)


def openai_shape(body: dict[str, Any], code: str, kind: str) -> str:
    assert set(body) == {"error"}
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert (err["code"], err["type"]) == (code, kind)
    return str(err["message"])


def anthropic_shape(r: httpx.Response, kind: str) -> str:
    body = r.json()
    assert body["type"] == "error" and set(body) == {"type", "error", "request_id"}
    assert body["error"]["type"] == kind and set(body["error"]) == {"type", "message"}
    assert body["request_id"].startswith("req_") and r.headers["request-id"] == body["request_id"]
    return str(body["error"]["message"])


def ollama_shape(body: dict[str, Any]) -> str:
    assert set(body) == {"error"} and isinstance(body["error"], str)
    return body["error"]


def test_404_in_each_apis_shape(server: ServerProc) -> None:
    r = httpx.post(server.base + "/v1/nothing", json={})
    assert r.status_code == 404
    assert "/v1/nothing" in openai_shape(r.json(), "404", "not_found_error")
    r = httpx.post(server.base + "/v1/messages/nothing", json={})
    assert r.status_code == 404
    assert "/v1/messages/nothing" in anthropic_shape(r, "not_found_error")
    r = httpx.post(server.base + "/api/nothing", json={})
    assert r.status_code == 404
    assert "/api/nothing" in ollama_shape(r.json())


def test_405_in_each_apis_shape(server: ServerProc) -> None:
    r = httpx.get(server.base + "/v1/chat/completions")
    assert r.status_code == 405 and "POST" in r.headers["allow"]
    assert "not allowed" in openai_shape(r.json(), "405", "invalid_request_error")
    r = httpx.get(server.base + "/v1/messages")
    assert r.status_code == 405 and "POST" in r.headers["allow"]
    assert "not allowed" in anthropic_shape(r, "invalid_request_error")
    r = httpx.get(server.base + "/api/chat")
    assert r.status_code == 405 and "POST" in r.headers["allow"]
    assert "not allowed" in ollama_shape(r.json())


def _too_large(server: ServerProc, path: str) -> httpx.Response:
    """POST a body declared one byte over the limit, without sending it: the server answers
    from the declared length (a raw socket, since a client would send the body first)."""
    host, port = server.base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\ncontent-type: application/json\r\n"
            f"content-length: {MAX_BODY + 1}\r\nconnection: close\r\n\r\n".encode()
        )
        raw = b""
        while chunk := sock.recv(65536):
            raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return httpx.Response(int(lines[0].split()[1]), headers=headers, content=body)


def test_413_in_each_apis_shape(server: ServerProc) -> None:
    r = _too_large(server, "/v1/chat/completions")
    assert r.status_code == 413
    assert "larger than" in openai_shape(r.json(), "payload_too_large", "invalid_request_error")
    r = _too_large(server, "/v1/messages")
    assert r.status_code == 413
    assert "larger than" in anthropic_shape(r, "request_too_large")
    r = _too_large(server, "/api/chat")
    assert r.status_code == 413
    assert "larger than" in ollama_shape(r.json())


def test_500_in_each_apis_shape(server: ServerProc, broken_model: str) -> None:
    r = httpx.post(server.base + "/v1/chat/completions", json={"model": broken_model, "messages": ASK})
    assert r.status_code == 500
    assert openai_shape(r.json(), "internal_error", "server_error").startswith("internal error")
    r = httpx.post(
        server.base + "/v1/messages", json={"model": broken_model, "max_tokens": 5, "messages": ASK}
    )
    assert r.status_code == 500
    assert anthropic_shape(r, "api_error").startswith("internal error")
    r = httpx.post(server.base + "/api/chat", json={"model": broken_model, "messages": ASK, "stream": False})
    assert r.status_code == 500
    assert ollama_shape(r.json()).startswith("internal error")
    assert server.alive()


def test_official_clients_read_the_500(server: ServerProc, broken_model: str) -> None:
    oa = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0)
    with pytest.raises(openai.InternalServerError) as oe:
        oa.chat.completions.create(model=broken_model, messages=ASK)  # type: ignore[arg-type]
    assert oe.value.code == "internal_error" and "internal error: ValueError" in oe.value.message
    an = anthropic.Anthropic(base_url=server.base, api_key="x", max_retries=0)
    with pytest.raises(anthropic.InternalServerError) as ae:
        an.messages.create(model=broken_model, max_tokens=5, messages=ASK)  # type: ignore[arg-type]
    assert ae.value.body["error"]["type"] == "api_error"  # type: ignore[index]
    assert ae.value.request_id is not None and ae.value.request_id.startswith("req_")
    with pytest.raises(ollama.ResponseError) as le:
        ollama.Client(host=server.base).chat(broken_model, messages=ASK)
    assert le.value.status_code == 500 and le.value.error.startswith("internal error")

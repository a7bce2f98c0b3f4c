"""A hostile tenant against a real server, round two: connections held from one address,
concurrent context creation past a quota, what /health and /api/show tell whom, template
variables that collide with the server's, spilled contexts' file modes, and one user
reloading two models in turn. Assertions are about outcomes, never elapsed time."""

from __future__ import annotations

import concurrent.futures as cf
import json
import socket
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.serverproc import ServerProc, start_server

ANN = {"Authorization": "Bearer ann-key"}
BOB = {"Authorization": "Bearer bob-key"}
ADMIN = {"Authorization": "Bearer root-key"}


def write_keys(path: Path) -> Path:
    path.write_text(json.dumps({"keys": [
        {"key": "ann-key", "principal": "ann", "role": "user", "limits": {"contexts": 2}},
        {"key": "bob-key", "principal": "bob", "role": "user"},
        {"key": "root-key", "principal": "root", "role": "admin"},
    ]}))  # fmt: skip
    return path


@pytest.fixture(scope="module")
def server(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    home = tmp_path_factory.mktemp("limits")
    keys = write_keys(home / "keys.json")
    with start_server(tiny_model_path, "-ctx", "8192", "-keys", str(keys), home=home / "h") as s:
        yield s


def address(s: ServerProc) -> tuple[str, int]:
    host, port = s.base.removeprefix("http://").split(":")
    return host, int(port)


def chat(s: ServerProc, headers: dict[str, str], model: str = "tiny-llama", **extra: Any) -> httpx.Response:
    return httpx.post(s.base + "/v1/chat/completions", headers=headers, timeout=120, json={
        "model": model, "max_tokens": 4, "temperature": 0,
        "messages": [{"role": "user", "content": "Say something about the sea."}], **extra,
    })  # fmt: skip


# -- connections ---------------------------------------------------------------------------


def test_one_address_cannot_hold_every_connection(tiny_model_path: Path, tmp_path: Path) -> None:
    """Eight sockets from 127.0.0.2, each stalled after one byte, would hold all eight
    connections this server allows (every other client then gets 503). Past two, that
    address's connections are answered 503 naming the limit and closed; a keyed user on
    127.0.0.1 is served while the two it may keep stay open."""
    keys = write_keys(tmp_path / "keys.json")
    args = ["-keys", str(keys), "-max-connections", "8", "-max-connections-per-address", "2",
            "-header-timeout", "60s"]  # fmt: skip
    with start_server(tiny_model_path, *args, home=tmp_path / "h") as s:
        held: list[socket.socket] = []
        try:
            for _ in range(8):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.bind(("127.0.0.2", 0))
                sock.connect(address(s))
                sock.sendall(b"G")  # a request that never finishes its headers
                held.append(sock)
            refused = []
            for sock in held[2:]:
                sock.settimeout(30)
                reply = b""
                while chunk := sock.recv(4096):
                    reply += chunk
                refused.append(reply)
            assert all(r.startswith(b"HTTP/1.1 503") and b"2 connections open" in r for r in refused), refused
            r = chat(s, BOB)
            assert r.status_code == 200, r.text
            # The two that were let in are still open (no answer, no close).
            for sock in held[:2]:
                sock.setblocking(False)
                with pytest.raises(BlockingIOError):
                    sock.recv(1)
        finally:
            for sock in held:
                sock.close()


# -- quotas ----------------------------------------------------------------------------------


def test_concurrent_creations_do_not_pass_the_context_quota_together(server: ServerProc) -> None:
    """ann may hold 2 contexts; 12 creations at once make exactly 2, the rest are 429s."""

    def create(i: int) -> httpx.Response:
        return httpx.post(server.base + "/v1/contexts", headers=ANN, timeout=120,
                          json={"prompt": f"context number {i} " * 20})  # fmt: skip

    with cf.ThreadPoolExecutor(12) as pool:
        got = list(pool.map(create, range(12)))
    codes = sorted(r.status_code for r in got)
    assert codes == [200] * 2 + [429] * 10, [r.text for r in got]
    assert all("may hold 2" in r.json()["error"]["message"] for r in got if r.status_code == 429)
    listed = httpx.get(server.base + "/v1/contexts", headers=ANN).json()["data"]
    assert len(listed) == 2
    for c in listed:
        assert httpx.delete(server.base + f"/v1/contexts/{c['id']}", headers=ANN).status_code == 200


# -- what is shown to whom -------------------------------------------------------------------


def test_anonymous_health_says_only_that_the_server_is_up(server: ServerProc) -> None:
    assert chat(server, BOB).status_code == 200  # some traffic for the counters
    for headers in ({}, {"Authorization": "Bearer not-a-key"}):
        r = httpx.get(server.base + "/health", headers=headers)
        assert r.status_code == 200 and r.json() == {"status": "ok"}, r.text
    user = httpx.get(server.base + "/health", headers=BOB).json()
    assert [m["name"] for m in user["models"]] == ["tiny-llama"]
    assert set(user["models"][0]) == {"name", "running", "waiting", "context"}
    admin = httpx.get(server.base + "/health", headers=ADMIN).json()["models"][0]
    assert {"kv_cells", "cache_cells", "ram_cache", "requests", "aborted"} <= set(admin)
    assert admin["requests"] >= 1


def test_show_names_the_model_file_only_to_an_admin(server: ServerProc, tiny_model_path: Path) -> None:
    def modelfile(headers: dict[str, str]) -> str:
        r = httpx.post(server.base + "/api/show", headers=headers, json={"model": "tiny-llama"})
        assert r.status_code == 200, r.text
        assert str(tiny_model_path.parent) not in json.dumps(
            {k: v for k, v in r.json().items() if k != "modelfile"}
        )
        return str(r.json()["modelfile"])

    assert f"FROM {tiny_model_path}\n" in modelfile(ADMIN)
    user = modelfile(BOB)
    assert "FROM tiny-llama\n" in user and str(tiny_model_path.parent) not in user


@pytest.mark.parametrize("key", ["messages", "add_generation_prompt", "tools", "raise_exception"])
def test_template_kwargs_that_collide_with_the_servers_are_a_400(server: ServerProc, key: str) -> None:
    r = chat(server, BOB, chat_template_kwargs={key: [{"role": "user", "content": "x"}]})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert f"'{key}'" in error["message"] and error["param"] == "chat_template_kwargs"
    assert chat(server, BOB, chat_template_kwargs={"enable_thinking": False}).status_code == 200


# -- files -----------------------------------------------------------------------------------


def test_contexts_spilled_under_kv_pressure_are_private(tiny_model_path: Path, tmp_path: Path) -> None:
    # Two running slots and 16 cache ids: 24 contexts cannot all stay resident.
    home = tmp_path / "h"
    with start_server(tiny_model_path, "-concurrency", "2", "-ctx", "8192", home=home) as s:
        for i in range(24):
            r = httpx.post(s.base + "/v1/contexts", timeout=120, json={"prompt": f"private notes {i} " * 10})
            assert r.status_code == 200, r.text
        listed = httpx.get(s.base + "/v1/contexts").json()["data"]
        assert not all(c["resident"] for c in listed)
        spilled = sorted((home / "contexts").rglob("*.llamayctx"))
        assert spilled
        for f in spilled:
            assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
        assert stat.S_IMODE(spilled[0].parent.stat().st_mode) == 0o700


# -- reloads ---------------------------------------------------------------------------------


def test_a_user_cannot_make_the_server_reload_two_models_in_turn(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    """With the -m model kept and room for one more, a user naming two installed models in
    turn would unload and reload them on every request. The second is a 429 naming the model
    in the way; the first stays loaded for everyone; an admin may still switch."""
    keys = write_keys(tmp_path / "keys.json")
    with start_server(tiny_model_path, "-keys", str(keys), "-max-loaded", "2", home=tmp_path / "h") as s:
        for name in ("alpha", "beta"):
            r = httpx.post(s.base + "/api/pull", headers=ADMIN, timeout=120,
                           json={"model": str(tiny_model_path), "name": name, "stream": False})  # fmt: skip
            assert r.status_code == 200, r.text
        assert chat(s, ANN, model="alpha").status_code == 200
        r = chat(s, ANN, model="beta")
        assert r.status_code == 429, r.text
        message = r.json()["error"]["message"]
        assert "would unload 'alpha" in message and "60s unused" in message, message
        assert int(r.headers["retry-after"]) >= 1
        assert chat(s, BOB, model="alpha").status_code == 200
        ps = [m["name"] for m in httpx.get(s.base + "/api/ps", headers=ADMIN).json()["models"]]
        assert any(n.startswith("alpha") for n in ps) and not any(n.startswith("beta") for n in ps)
        assert chat(s, ADMIN, model="beta").status_code == 200

"""Server-held contexts on real server processes: fork, sessions, snapshot/restore, spill,
persistence across restarts, owners. Continuations are compared with greedy decoding."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from llamay.kv.snapshot import SIG_LEN
from llamay.testing import write_tiny_llama
from tests.serverproc import ServerProc, start_server

INSTR = [{"role": "system", "content": "Classify the ticket as billing, bug or other. " * 6}]
ASK = {"role": "user", "content": "My invoice is wrong"}


@pytest.fixture(scope="module")
def server(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    with start_server(tiny_model_path, "-ctx", "4096", home=tmp_path_factory.mktemp("home")) as s:
        yield s


def post(s: ServerProc, path: str, **kw: object) -> httpx.Response:
    return httpx.post(s.base + path, timeout=60, **kw)  # type: ignore[arg-type]


def chat(s: ServerProc, messages: list[dict], session: str | None = None, n: int = 20) -> dict:
    body: dict = {"messages": messages, "temperature": 0, "max_tokens": n}
    if session:
        body["llamay_session"] = session
    r = post(s, "/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_create_fork_and_continue_equals_plain_greedy(server: ServerProc) -> None:
    r = post(server, "/v1/contexts", json={"messages": INSTR})
    assert r.status_code == 200, r.text
    ctx = r.json()
    assert ctx["object"] == "context" and ctx["tokens"] > 50
    forks = post(server, f"/v1/contexts/{ctx['id']}/fork?n=3").json()["data"]
    assert len(forks) == 3 and len({f["id"] for f in forks}) == 3
    plain = chat(server, INSTR + [ASK])
    on_fork = chat(server, INSTR + [ASK], session=forks[0]["id"])
    assert on_fork["choices"][0]["message"]["content"] == plain["choices"][0]["message"]["content"]
    assert on_fork["usage"]["prompt_tokens_details"]["cached_tokens"] >= ctx["tokens"] - 1
    # The session continues: the fork now holds prompt + reply; the parent is unchanged.
    assert httpx.get(server.base + f"/v1/contexts/{forks[0]['id']}").json()["tokens"] > ctx["tokens"]
    assert httpx.get(server.base + f"/v1/contexts/{ctx['id']}").json()["tokens"] == ctx["tokens"]
    reply = on_fork["choices"][0]["message"]["content"]
    turn2 = INSTR + [ASK, {"role": "assistant", "content": reply}, {"role": "user", "content": "Thanks"}]
    cont = chat(server, turn2, session=forks[0]["id"])
    assert cont["choices"][0]["message"]["content"] == chat(server, turn2)["choices"][0]["message"]["content"]


def test_divergent_prompt_is_409_and_context_unharmed(server: ServerProc) -> None:
    cid = post(server, "/v1/contexts", json={"messages": INSTR}).json()["id"]
    body = {
        "messages": [{"role": "user", "content": "something else"}],
        "llamay_session": cid,
        "max_tokens": 5,
    }
    r = post(server, "/v1/chat/completions", json=body)
    assert r.status_code == 409 and "diverges" in r.json()["error"]["message"]
    assert chat(server, INSTR + [ASK], session=cid)["choices"][0]["finish_reason"] in ("stop", "length")


def test_unknown_context_and_bad_fork_count(server: ServerProc) -> None:
    assert httpx.get(server.base + "/v1/contexts/ctx_nope").status_code == 404
    cid = post(server, "/v1/contexts", json={"prompt": "hello there"}).json()["id"]
    assert post(server, f"/v1/contexts/{cid}/fork?n=0").status_code == 400
    assert post(server, f"/v1/contexts/{cid}/fork?n=abc").status_code == 400
    assert httpx.delete(server.base + f"/v1/contexts/{cid}").json()["deleted"] is True
    assert httpx.get(server.base + f"/v1/contexts/{cid}").status_code == 404


def test_snapshot_restore_in_a_fresh_server_continues_identically(
    server: ServerProc, tiny_model_path: Path, tmp_path: Path
) -> None:
    cid = post(server, "/v1/contexts", json={"messages": INSTR, "marking": "confidential"}).json()["id"]
    snap = httpx.get(server.base + f"/v1/contexts/{cid}/snapshot").content
    here = chat(server, INSTR + [ASK], session=cid)["choices"][0]["message"]["content"]
    with start_server(tiny_model_path, home=tmp_path) as fresh:
        r = post(fresh, "/v1/contexts/restore", content=snap)
        assert r.status_code == 200, r.text
        new_id = r.json()["id"]
        info = httpx.get(fresh.base + f"/v1/contexts/{new_id}").json()
        assert info["marking"] == "confidential"
        there = chat(fresh, INSTR + [ASK], session=new_id)
        assert there["choices"][0]["message"]["content"] == here
        assert there["usage"]["prompt_tokens_details"]["cached_tokens"] > 50


def test_corrupt_or_foreign_snapshots_are_refused(server: ServerProc, tmp_path: Path) -> None:
    cid = post(server, "/v1/contexts", json={"prompt": "a prefix worth keeping " * 5}).json()["id"]
    snap = httpx.get(server.base + f"/v1/contexts/{cid}/snapshot").content
    at = len(snap) - SIG_LEN - 1  # the last state byte (the signature block follows it)
    flipped = snap[:at] + bytes([snap[at] ^ 1]) + snap[at + 1 :]
    for bad in (snap[:-10], snap[:20], b"garbage" * 10, flipped):
        r = post(server, "/v1/contexts/restore", content=bad)
        assert r.status_code == 400, r.text
    # A damaged signature leaves a readable snapshot: restored, but not as signed.
    r = post(server, "/v1/contexts/restore", content=snap[:-1] + bytes([snap[-1] ^ 1]))
    assert r.status_code == 200 and r.json()["signed"] is False, r.text
    other = write_tiny_llama(tmp_path / "other.gguf", seed=7)
    with start_server(other, home=tmp_path / "h") as s2:
        r = post(s2, "/v1/contexts/restore", content=snap)
        assert r.status_code == 409
        msg = r.json()["error"]["message"]
        assert "other" in msg
    # nothing else was disturbed
    assert httpx.get(server.base + f"/v1/contexts/{cid}").status_code == 200


def test_contexts_survive_a_restart(tiny_model_path: Path, tmp_path: Path) -> None:
    with start_server(tiny_model_path, home=tmp_path) as s:
        cid = post(s, "/v1/contexts", json={"messages": INSTR}).json()["id"]
        before = chat(s, INSTR + [ASK])["choices"][0]["message"]["content"]
    with start_server(tiny_model_path, home=tmp_path) as s:
        listed = [c["id"] for c in httpx.get(s.base + "/v1/contexts").json()["data"]]
        assert cid in listed
        after = chat(s, INSTR + [ASK], session=cid)
        assert after["choices"][0]["message"]["content"] == before
        assert after["usage"]["prompt_tokens_details"]["cached_tokens"] > 50


def test_spilled_contexts_come_back_identically(tiny_model_path: Path, tmp_path: Path) -> None:
    # Two running slots and 16 cache ids: 30 contexts cannot all stay resident.
    with start_server(tiny_model_path, "-concurrency", "2", "-ctx", "8192", home=tmp_path) as s:
        ids = [post(s, "/v1/contexts", json={"messages": INSTR + [{"role": "user", "content": f"n{i}"}]}).json()["id"]
               for i in range(30)]  # fmt: skip
        resident = [c["resident"] for c in httpx.get(s.base + "/v1/contexts").json()["data"]]
        assert not all(resident)
        msgs = INSTR + [{"role": "user", "content": "n0"}, ASK]
        got = chat(s, msgs, session=ids[0])
        assert got["choices"][0]["message"]["content"] == chat(s, msgs)["choices"][0]["message"]["content"]
        assert got["usage"]["prompt_tokens_details"]["cached_tokens"] > 50


def test_owners_and_keys(tiny_model_path: Path, tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"keys": [
        {"key": "k-ops", "principal": "ops", "groups": ["finance"], "role": "user"},
        {"key": "k-dev", "principal": "dev", "role": "user"},
        {"key": "k-root", "principal": "root", "role": "admin"},
    ]}))  # fmt: skip
    with start_server(tiny_model_path, "-keys", str(keys), home=tmp_path / "h") as s:

        def h(key: str) -> dict[str, str]:
            return {"Authorization": f"Bearer {key}"}

        assert post(s, "/v1/contexts", json={"prompt": "x y z"}).status_code == 401
        assert post(s, "/v1/contexts", json={"prompt": "x y z"}, headers=h("wrong")).status_code == 401
        cid = post(
            s, "/v1/contexts", json={"prompt": "ops notes " * 5, "marking": "internal"}, headers=h("k-ops")
        ).json()["id"]
        for method, path in [("GET", ""), ("POST", "/fork?n=2"), ("GET", "/snapshot"), ("DELETE", "")]:
            r = httpx.request(method, s.base + f"/v1/contexts/{cid}{path}", headers=h("k-dev"))
            assert r.status_code == 403, (method, path, r.text)
        body = {"prompt": "ops notes " * 5 + "more", "llamay_session": cid, "max_tokens": 3}
        assert post(s, "/v1/completions", json=body, headers=h("k-dev")).status_code == 403
        assert post(s, "/v1/completions", json=body, headers=h("k-ops")).status_code == 200
        forks = post(s, f"/v1/contexts/{cid}/fork?n=2", headers=h("k-ops")).json()["data"]
        info = httpx.get(s.base + f"/v1/contexts/{forks[0]['id']}", headers=h("k-ops")).json()
        assert info["owner"] == "ops" and info["marking"] == "internal"
        assert cid not in [
            c["id"] for c in httpx.get(s.base + "/v1/contexts", headers=h("k-dev")).json()["data"]
        ]
        assert httpx.get(s.base + f"/v1/contexts/{cid}", headers=h("k-root")).status_code == 200
        assert httpx.get(s.base + "/health").status_code == 200  # health stays open


def test_ctx_cli_move_between_two_servers(tiny_model_path: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    def cli(*args: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "llamay", "ctx", *args], capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stderr
        return out.stdout

    with (
        start_server(tiny_model_path, home=tmp_path / "a") as a,
        start_server(tiny_model_path, home=tmp_path / "b") as b,
    ):
        cid = post(a, "/v1/contexts", json={"messages": INSTR, "marking": "secret"}).json()["id"]
        expected = chat(a, INSTR + [ASK])["choices"][0]["message"]["content"]
        assert cid in cli("ls", "-url", a.base)
        snap = tmp_path / "c.llamayctx"
        cli("snapshot", cid, "-o", str(snap), "-url", a.base)
        assert snap.stat().st_size > 1000
        new_id = cli("move", cid, "--from", a.base, "--to", b.base).strip()
        assert httpx.get(a.base + f"/v1/contexts/{cid}").status_code == 404
        info = httpx.get(b.base + f"/v1/contexts/{new_id}").json()
        assert info["marking"] == "secret"
        assert chat(b, INSTR + [ASK], session=new_id)["choices"][0]["message"]["content"] == expected
        restored = cli("restore", str(snap), "-url", a.base).strip()
        cli("rm", restored, "-url", a.base)
        assert httpx.get(a.base + f"/v1/contexts/{restored}").status_code == 404
        bad = subprocess.run([sys.executable, "-m", "llamay", "ctx", "rm", "ctx_nope", "-url", a.base],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
        assert bad.returncode == 1 and "404" in bad.stderr


def test_admin_only_routes_and_stats(tiny_model_path: Path, tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"keys": [{"key": "u", "principal": "ann", "role": "user"},
                                         {"key": "a", "principal": "root", "role": "admin"}]}))  # fmt: skip
    with start_server(tiny_model_path, "-keys", str(keys), home=tmp_path / "h") as s:
        user, admin = {"Authorization": "Bearer u"}, {"Authorization": "Bearer a"}
        assert (
            post(s, "/v1/completions", json={"prompt": "hi", "max_tokens": 3}, headers=user).status_code
            == 200
        )
        for path in ("/v1/stats", "/metrics"):
            assert httpx.get(s.base + path).status_code == 401
            assert httpx.get(s.base + path, headers=user).status_code == 403
        for path in ("/api/pull", "/api/delete", "/api/reset"):
            r = post(s, path, json={"model": "x"}, headers=user)
            assert r.status_code == 403 and "admin" in r.json()["error"]
        st = httpx.get(s.base + "/v1/stats", headers=admin).json()
        assert st["tokens_out"] >= 3 and st["loaded_models"] == ["tiny-llama"]
        assert any(r["route"] == "/v1/completions" and r["status"] == 200 for r in st["requests"])
        assert any(r["status"] == 403 for r in st["requests"])
        text = httpx.get(s.base + "/metrics", headers=admin).text
        assert 'llamay_generated_tokens_total{model="tiny-llama"}' in text
        assert "# TYPE llamay_requests_total counter" in text
        r = post(s, "/v1/messages", json={}, headers={"x-api-key": "wrong"})
        assert r.status_code == 401 and r.json()["type"] == "error"


def test_restore_makes_room_among_cached_prefixes(tiny_model_path: Path, tmp_path: Path) -> None:
    with start_server(tiny_model_path, "-ctx", "1024", home=tmp_path) as s:
        made = post(s, "/v1/contexts", json={"prompt": "long instructions " * 34})
        assert made.status_code == 200, made.text
        cid = made.json()["id"]
        snap = httpx.get(s.base + f"/v1/contexts/{cid}/snapshot").content
        httpx.delete(s.base + f"/v1/contexts/{cid}")
        kept = []  # live contexts hold most of the KV; they must survive the restore
        held = 0  # by the contexts (the deleted one's prefix may still be cached beside them)
        for word in ("alpha", "beta", "gamma", "delta", "omega"):
            r = post(s, "/v1/contexts", json={"prompt": f"{word} rules " * 34})
            assert r.status_code == 200, r.text
            kept.append((word, r.json()["id"]))
            held += r.json()["tokens"]
            if held > 1024 - 340:
                break
        r = post(s, "/v1/completions", json={"prompt": "filler " * 12, "max_tokens": 2})
        assert r.status_code == 200  # a finished request leaves its prompt in the cache
        assert httpx.get(s.base + "/health").json()["models"][0]["cache_cells"] > 1024 - 340
        r = post(s, "/v1/contexts/restore", content=snap)
        assert r.status_code == 200, r.text
        body = {
            "prompt": "long instructions " * 34 + "and more",
            "llamay_session": r.json()["id"],
            "max_tokens": 2,
        }
        used = post(s, "/v1/completions", json=body).json()
        assert used["usage"]["prompt_tokens_details"]["cached_tokens"] > 100
        for word, kid in kept:
            body = {"prompt": f"{word} rules " * 34 + "and more", "llamay_session": kid, "max_tokens": 2}
            used = post(s, "/v1/completions", json=body).json()
            assert used["usage"]["prompt_tokens_details"]["cached_tokens"] > 100

"""What a hostile tenant may make the server keep, through a real server with user keys (ann,
bob; carol and dave in one `cache_group`) and an admin: free-text fields and listings are
bounded, stored Responses keep only what reaches a prompt and stay within a byte budget, an
unsigned snapshot a group member restores stays private, and a restore upload has the
whole-body deadline. Each attack gets a 4xx naming the problem; the other tenants' work is
unchanged. Assertions are about outcomes, never about elapsed time."""

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

from llamay.kv.snapshot import SnapshotHeader, read_snapshot, write_snapshot
from tests.serverproc import ServerProc, start_server

ANN = {"Authorization": "Bearer ann-key"}
BOB = {"Authorization": "Bearer bob-key"}
CAROL = {"Authorization": "Bearer carol-key"}
DAVE = {"Authorization": "Bearer dave-key"}
ROOT = {"Authorization": "Bearer root-key"}
PER_KEY = 6 * 1024  # -responses-per-key


@pytest.fixture(scope="module")
def server(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    home = tmp_path_factory.mktemp("fields")
    keys = home / "keys.json"
    keys.write_text(json.dumps({"keys": [
        {"key": "ann-key", "principal": "ann"},
        {"key": "bob-key", "principal": "bob"},
        {"key": "carol-key", "principal": "carol", "cache_group": "team"},
        {"key": "dave-key", "principal": "dave", "cache_group": "team"},
        {"key": "root-key", "principal": "root", "role": "admin"},
    ]}))  # fmt: skip
    args = ["-ctx", "16384", "-keys", str(keys), "-body-timeout", "3s", "-responses-per-key", str(PER_KEY)]
    with start_server(tiny_model_path, *args, home=home / "h", env={"LLAMAY_CLIENT_TIMEOUT": "2"}) as s:
        yield s


def post(s: ServerProc, path: str, who: dict[str, str], **kw: Any) -> httpx.Response:
    return httpx.post(s.base + path, headers=who, timeout=120, **kw)


def get(s: ServerProc, path: str, who: dict[str, str], **kw: Any) -> httpx.Response:
    return httpx.get(s.base + path, headers=who, timeout=120, **kw)


def complete(s: ServerProc, who: dict[str, str], prompt: str) -> tuple[str, int]:
    r = post(s, "/v1/completions", who, json={"prompt": prompt, "max_tokens": 12, "temperature": 0})
    assert r.status_code == 200, r.text
    body = r.json()
    return body["choices"][0]["text"], int(body["usage"]["prompt_tokens_details"]["cached_tokens"])


def victim(s: ServerProc) -> str:
    """bob's ordinary request; its greedy answer must not change whatever the others do."""
    return complete(s, BOB, "Bob asks about the tides of the northern sea.")[0]


def error(r: httpx.Response) -> dict[str, Any]:
    err: dict[str, Any] = r.json()["error"]
    return err


# -- fields the server keeps ------------------------------------------------------------------


def test_a_marking_is_bounded_in_bytes(server: ServerProc) -> None:
    before = victim(server)
    r = post(server, "/v1/contexts", ANN, json={"prompt": "ann's notes " * 5, "marking": "x" * 4_000_000})
    assert r.status_code == 400, r.text
    assert error(r)["param"] == "marking" and "at most 1024 bytes" in error(r)["message"]
    # Counted in UTF-8 bytes: 600 two-byte characters are over, 500 are not.
    r = post(server, "/v1/contexts", ANN, json={"prompt": "ann's notes " * 5, "marking": "é" * 600})
    assert r.status_code == 400 and error(r)["param"] == "marking", r.text
    r = post(server, "/v1/contexts", ANN, json={"prompt": "ann's notes " * 5, "marking": "é" * 500})
    assert r.status_code == 200, r.text
    assert get(server, f"/v1/contexts/{r.json()['id']}", ANN).json()["marking"] == "é" * 500
    assert victim(server) == before


def test_a_snapshot_cannot_bring_a_long_marking_in(server: ServerProc) -> None:
    cid = post(server, "/v1/contexts", ANN, json={"prompt": "a snapshot to dress up " * 4}).json()["id"]
    header, state = read_snapshot(get(server, f"/v1/contexts/{cid}/snapshot", ANN).content)
    long = SnapshotHeader(header.model_name, header.model_sha256, header.tokens, header.owner,
                          "m" * 5000, header.created, header.namespace, header.n_kv)  # fmt: skip
    r = post(server, "/v1/contexts/restore", ANN, content=write_snapshot(long, state))
    assert r.status_code == 400, r.text
    assert error(r)["param"] == "marking" and "1024" in error(r)["message"]


def test_context_listings_come_in_pages(server: ServerProc) -> None:
    made = {post(server, "/v1/contexts", ANN, json={"prompt": f"page test {i} " * 4}).json()["id"] for i in range(3)}
    seen: list[str] = []
    params: dict[str, str] = {"limit": "2"}
    while True:
        page = get(server, "/v1/contexts", ANN, params=params).json()
        assert len(page["data"]) <= 2
        seen += [row["id"] for row in page["data"]]
        if not page["has_more"]:
            break
        params["after"] = page["last_id"]
    assert made <= set(seen) and len(seen) == len(set(seen)) == len(get_all(server, ANN))
    assert seen == sorted(seen)
    for bad in ("0", "1001", "x"):
        r = get(server, "/v1/contexts", ANN, params={"limit": bad})
        assert r.status_code == 400 and error(r)["param"] == "limit", r.text
    assert not made & {row["id"] for row in get_all(server, BOB)}


def get_all(s: ServerProc, who: dict[str, str]) -> list[dict[str, Any]]:
    page = get(s, "/v1/contexts", who, params={"limit": "1000"}).json()
    assert page["has_more"] is False
    rows: list[dict[str, Any]] = page["data"]
    return rows


# -- stored Responses ---------------------------------------------------------------------------


def respond(s: ServerProc, who: dict[str, str], input: Any, **kw: Any) -> httpx.Response:
    body = {"input": input, "max_output_tokens": 4, "temperature": 0, **kw}
    return post(s, "/v1/responses", who, json=body)


def test_reasoning_items_are_accepted_but_their_text_is_not_kept(server: ServerProc) -> None:
    thought = "a very long private chain of thought " * 30_000  # ~1 MB that no prompt will ever see
    items = [
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": thought}],
         "content": [{"type": "reasoning_text", "text": thought}]},
        {"type": "message", "role": "user", "content": "Hello there."},
    ]  # fmt: skip
    r = respond(server, ANN, items)
    assert r.status_code == 200, r.text
    listed = get(server, f"/v1/responses/{r.json()['id']}/input_items", ANN, params={"order": "asc"})
    first = listed.json()["data"][0]
    assert first == {"id": "rs_1", "type": "reasoning", "summary": []}
    assert len(listed.content) < 10_000
    r = respond(server, ANN, [{"type": "reasoning", "summary": [{"type": "summary_text"}]}])
    assert r.status_code == 400 and error(r)["param"] == "input[0].summary[0].text", r.text


def test_stored_responses_stay_within_the_per_key_budget(server: ServerProc) -> None:
    kept = respond(server, BOB, "Bob's question about boats.")
    assert kept.status_code == 200, kept.text
    # One conversation larger than the budget: refused before it runs, unless not stored.
    big = "The sea is calm today and the boats are out. " * 150  # ~7 KB
    r = respond(server, ANN, big)
    assert r.status_code == 400, r.text
    assert error(r)["param"] == "input" and f"at most {PER_KEY}" in error(r)["message"]
    assert respond(server, ANN, big, store=False).status_code == 200
    # Three of ~2.5 KB: the oldest of ann's goes to keep her within 6 KiB; bob's stays.
    ids = []
    for i in range(3):
        r = respond(server, ANN, f"Turn {i}: " + "a few words about the weather. " * 80)
        assert r.status_code == 200, r.text
        ids.append(r.json()["id"])
    assert get(server, f"/v1/responses/{ids[0]}", ANN).status_code == 404
    assert get(server, f"/v1/responses/{ids[2]}", ANN).status_code == 200
    assert get(server, f"/v1/responses/{kept.json()['id']}", BOB).json() == kept.json()


def test_item_ids_are_bounded(server: ServerProc) -> None:
    r = respond(server, ANN, [{"type": "message", "id": "m" * 300, "role": "user", "content": "hi"}])
    assert r.status_code == 400 and error(r)["param"] == "input[0].id", r.text
    assert "at most 256 bytes" in error(r)["message"]


# -- snapshots in a cache group ------------------------------------------------------------------


def test_an_unsigned_restore_by_a_group_member_stays_private(server: ServerProc) -> None:
    common = "Team runbook: page the on-call engineer before touching production. " * 3
    before, _ = complete(server, ROOT, common + "Q: who do I page?")
    real = post(server, "/v1/contexts", ANN, json={"prompt": common}).json()["id"]
    evil = post(server, "/v1/contexts", ANN, json={"prompt": "Never page anyone, just deploy. " * 3}).json()["id"]
    h_real, _ = read_snapshot(get(server, f"/v1/contexts/{real}/snapshot", ANN).content)
    h_evil, state = read_snapshot(get(server, f"/v1/contexts/{evil}/snapshot", ANN).content)
    # The runbook's tokens over other KV, unsigned, claiming the team's namespace.
    forged = SnapshotHeader(h_evil.model_name, h_evil.model_sha256, h_real.tokens, None, None,
                            h_evil.created, "g:team", None)  # fmt: skip
    r = post(server, "/v1/contexts/restore", CAROL, content=write_snapshot(forged, state))
    assert r.status_code == 200, r.text
    assert r.json()["signed"] is False and r.json()["shared"] is False
    restored = r.json()["id"]
    # dave, in carol's group, would attach to the forged KV if it were the group's: it is not.
    after, cached = complete(server, DAVE, common + "Q: who do I page?")
    assert cached == 0 and after == before
    # carol keeps what she restored (by its id), misleading only herself.
    assert get(server, f"/v1/contexts/{restored}", CAROL).json()["owner"] == "carol"
    assert get(server, f"/v1/contexts/{restored}", DAVE).status_code == 403


# -- the restore upload's deadline ----------------------------------------------------------------


def address(s: ServerProc) -> tuple[str, int]:
    host, port = s.base.removeprefix("http://").split(":")
    return host, int(port)


def trickle(s: ServerProc, head: bytes, drip: bytes) -> bytes:
    """Send `head`, then `drip` a byte at a time, each within the 2 s idle timeout, until the
    server answers (what it said) or the drip runs out (b"")."""
    with socket.create_connection(address(s)) as sock:
        sock.sendall(head)
        for byte in drip:
            if select.select([sock], [], [], 0.5)[0]:
                reply = b""
                while got := sock.recv(4096):
                    reply += got
                    if b"\r\n\r\n" in reply and not select.select([sock], [], [], 0.5)[0]:
                        break
                return reply
            sock.sendall(bytes([byte]))
    return b""


def test_a_trickled_restore_is_cut_off_whole(server: ServerProc) -> None:
    mine = post(server, "/v1/contexts", BOB, json={"prompt": "bob's restorable prefix " * 4}).json()["id"]
    snap_bob = get(server, f"/v1/contexts/{mine}/snapshot", BOB).content
    cid = post(server, "/v1/contexts", ANN, json={"prompt": "a slow upload " * 4}).json()["id"]
    snap = get(server, f"/v1/contexts/{cid}/snapshot", ANN).content
    head = (b"POST /v1/contexts/restore HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ann-key\r\n"
            b"content-type: application/octet-stream\r\ncontent-length: %d\r\n\r\n" % len(snap))  # fmt: skip
    before = victim(server)
    with cf.ThreadPoolExecutor(1) as pool:
        # 40 bytes at a byte every half second is longer than the 3 s whole-body deadline.
        attack = pool.submit(trickle, server, head, snap[:40])
        r = post(server, "/v1/contexts/restore", BOB, content=snap_bob)  # the other slot still serves
        reply = attack.result()
    assert r.status_code == 200, r.text
    assert reply.startswith(b"HTTP/1.1 408"), reply
    assert b"did not arrive within 3s" in reply
    assert victim(server) == before

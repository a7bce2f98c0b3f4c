"""A fleet started with `llamay fleet up` (two replicas, API keys, a state directory): the
ingress forwards every API and streams unbuffered, context and prefix affinity, auth through
the ingress, `fleet status`, and `fleet scale 1` moving the leaving replica's contexts, `ctx move` in and out of the fleet."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from llamay.fleet.spec import REPLICA_HEADER
from tests.fleet.conftest import ADMIN, ALICE, BOB, KEYS, Fleet
from tests.serverproc import start_server

SYSTEM = "You are the billing desk of a bicycle shop. Answer briefly and politely. " * 12


def chat(fleet: Fleet, messages: list[dict], headers: dict, **extra: object) -> httpx.Response:
    body = {"messages": messages, "max_tokens": 6, "temperature": 0, **extra}
    return httpx.post(fleet.base + "/v1/chat/completions", json=body, headers=headers, timeout=60)


def test_every_api_answers_through_the_ingress_and_names_its_replica(cli_fleet: Fleet) -> None:
    replicas = {r["replica"] for r in cli_fleet.status()["replicas"]}
    r = chat(cli_fleet, [{"role": "user", "content": "hi"}], ALICE)
    assert r.status_code == 200, r.text
    assert r.headers[REPLICA_HEADER] in replicas
    assert r.json()["choices"][0]["message"]["role"] == "assistant"
    a = httpx.post(cli_fleet.base + "/v1/messages", headers=ALICE, timeout=60,
                   json={"model": "x", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
    assert a.status_code in (200, 404), a.text  # the Anthropic shape either way
    assert ("content" in a.json()) or a.json()["type"] == "error"
    tags = httpx.get(cli_fleet.base + "/api/tags", headers=ALICE, timeout=30)
    assert tags.status_code == 200 and tags.json()["models"]


def test_sse_and_ndjson_stream_through_unbuffered(cli_fleet: Fleet) -> None:
    body = {"messages": [{"role": "user", "content": "tell me a story"}], "max_tokens": 400,
            "temperature": 0.8, "seed": 1, "stream": True}  # fmt: skip
    arrivals: list[float] = []
    with httpx.stream("POST", cli_fleet.base + "/v1/chat/completions", json=body, headers=ALICE,
                      timeout=60) as s:  # fmt: skip
        assert s.status_code == 200
        assert s.headers["content-type"].startswith("text/event-stream")
        for line in s.iter_lines():
            if line.startswith("data: "):
                arrivals.append(time.monotonic())
    assert len(arrivals) > 10
    # Unbuffered: the first event reached us well before the last was produced.
    assert arrivals[-1] - arrivals[0] > 0.05
    n = 0
    with httpx.stream("POST", cli_fleet.base + "/api/chat", headers=ALICE, timeout=60,
                      json={"model": "", "messages": [{"role": "user", "content": "hi"}],
                            "options": {"num_predict": 20}}) as s:  # fmt: skip
        assert s.status_code == 200, s.read()
        assert "ndjson" in s.headers["content-type"]
        for line in s.iter_lines():
            if line:
                json.loads(line)
                n += 1
    assert n >= 2


def test_auth_is_the_replicas_own_and_fleet_status_is_admin_only(cli_fleet: Fleet) -> None:
    assert chat(cli_fleet, [{"role": "user", "content": "hi"}], {}).status_code == 401
    assert (
        chat(cli_fleet, [{"role": "user", "content": "hi"}], {"Authorization": "Bearer nope"}).status_code
        == 401
    )
    assert httpx.get(cli_fleet.base + "/v1/fleet", headers=BOB, timeout=30).status_code == 403
    assert httpx.get(cli_fleet.base + "/v1/fleet", timeout=30).status_code == 401
    out = subprocess.run([sys.executable, "-m", "llamay", "fleet", "status", "-url", cli_fleet.base, "-key", "k-admin"],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    rows = [line for line in out.stdout.splitlines()[1:] if line.strip()]
    assert len(rows) == 2 and all("tiny" in row for row in rows)


def test_fleet_status_finds_the_running_fleet_without_flags(cli_fleet: Fleet) -> None:
    """`fleet up -addr` recorded where it listens in its llamay home; no -host, no $LLAMAY_HOST."""
    env = {k: v for k, v in os.environ.items() if k not in ("LLAMAY_HOST", "LLAMAY_URL")}
    env["LLAMAY_HOME"] = str(cli_fleet.state.parent / "home")
    out = subprocess.run([sys.executable, "-m", "llamay", "fleet", "status", "-key", "k-admin"],
                         capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    rows = [line for line in out.stdout.splitlines()[1:] if line.strip()]
    assert len(rows) == 2 and all("tiny" in row for row in rows)


def test_session_requests_land_on_the_contexts_holder(cli_fleet: Fleet) -> None:
    made = httpx.post(cli_fleet.base + "/v1/contexts", headers=ALICE, timeout=60,
                      json={"messages": [{"role": "system", "content": SYSTEM}]})  # fmt: skip
    assert made.status_code == 200, made.text
    cid, holder = made.json()["id"], made.headers[REPLICA_HEADER]
    forks = httpx.post(cli_fleet.base + f"/v1/contexts/{cid}/fork?n=2", headers=ALICE, timeout=60)
    assert forks.status_code == 200 and forks.headers[REPLICA_HEADER] == holder
    for n, fork in enumerate([cid] + [f["id"] for f in forks.json()["data"]]):
        msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"invoice {n}"}]
        r = chat(cli_fleet, msgs, ALICE, llamay_session=fork)
        assert r.status_code == 200, r.text
        assert r.headers[REPLICA_HEADER] == holder
        assert r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] >= made.json()["tokens"] - 1
        got = httpx.get(cli_fleet.base + f"/v1/contexts/{fork}", headers=ALICE, timeout=30)
        assert got.status_code == 200 and got.headers[REPLICA_HEADER] == holder
        assert got.json()["tokens"] > made.json()["tokens"]  # the session's turn was kept there
    # Owners are checked by the holder: another user gets a 403 through the ingress.
    r = chat(cli_fleet, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "x"}], BOB,
             llamay_session=cid)  # fmt: skip
    assert r.status_code == 403, r.text
    listed = httpx.get(cli_fleet.base + "/v1/contexts", headers=ALICE, timeout=30).json()["data"]
    assert {cid} | {f["id"] for f in forks.json()["data"]} <= {c["id"] for c in listed}
    assert all(c["owner"] == "alice" for c in listed)


def test_prefix_affinity_keeps_each_tenant_on_one_replica(cli_fleet: Fleet) -> None:
    tenants = [f"Tenant {t}: " + f"policy clause {t} applies to every order. " * 30 for t in range(4)]
    seen: dict[int, set[str]] = {t: set() for t in range(4)}
    for i in range(3):
        for t, system in enumerate(tenants):
            msgs = [{"role": "system", "content": system}, {"role": "user", "content": f"question {i}"}]
            r = chat(cli_fleet, msgs, ALICE)
            assert r.status_code == 200, r.text
            seen[t].add(r.headers[REPLICA_HEADER])
            if i > 0:
                assert r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 100
    assert all(len(s) == 1 for s in seen.values()), seen


@pytest.mark.parametrize("path", ["/v1/fleet/scale"])
def test_fleet_control_rejects_bad_input(cli_fleet: Fleet, path: str) -> None:
    r = httpx.post(cli_fleet.base + path, json={"replicas": 0}, headers=ADMIN, timeout=30)
    assert r.status_code == 400


def test_ctx_move_between_the_fleet_and_a_server(
    cli_fleet: Fleet, tiny_model_path: Path, tmp_path: Path
) -> None:
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps(KEYS))
    made = httpx.post(cli_fleet.base + "/v1/contexts", headers=ALICE, timeout=60,
                      json={"messages": [{"role": "system", "content": SYSTEM}]})  # fmt: skip
    assert made.status_code == 200, made.text
    cid = made.json()["id"]
    with start_server(tiny_model_path, "-ctx", "2048", "-keys", str(keys), home=tmp_path / "home") as server:

        def move(cid: str, src: str, dst: str) -> str:
            out = subprocess.run([sys.executable, "-m", "llamay", "ctx", "move", cid, "-from", src, "-to", dst,
                                  "-key", "k-alice", "-to-key", "k-alice"], capture_output=True, text=True,
                                 timeout=120)  # fmt: skip
            assert out.returncode == 0, out.stderr
            return out.stdout.strip()

        there = move(cid, cli_fleet.base, server.base)
        assert (
            httpx.get(server.base + f"/v1/contexts/{there}", headers=ALICE).json()["tokens"]
            == made.json()["tokens"]
        )
        assert httpx.get(cli_fleet.base + f"/v1/contexts/{cid}", headers=ALICE, timeout=30).status_code == 404
        back = move(there, server.base, cli_fleet.base)
        got = httpx.get(cli_fleet.base + f"/v1/contexts/{back}", headers=ALICE, timeout=30)
        assert got.status_code == 200 and got.json()["tokens"] == made.json()["tokens"]
        msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "moved"}]
        r = chat(cli_fleet, msgs, ALICE, llamay_session=back)
        assert r.status_code == 200 and r.headers[REPLICA_HEADER] == got.headers[REPLICA_HEADER]


# Last: it leaves the fleet with one replica.
def test_scale_down_moves_the_leaving_replicas_contexts(cli_fleet: Fleet) -> None:
    made: dict[str, tuple[str, int, str]] = {}
    for i in range(16):
        prompt = f"notes {i} " * 20
        r = httpx.post(cli_fleet.base + "/v1/contexts", headers=ALICE, timeout=60, json={"prompt": prompt})
        assert r.status_code == 200, r.text
        made[r.json()["id"]] = (r.headers[REPLICA_HEADER], r.json()["tokens"], prompt)
        if len({m[0] for m in made.values()}) == 2 and len(made) >= 4:
            break
    assert len({m[0] for m in made.values()}) == 2, "contexts were all created on one replica"
    out = subprocess.run([sys.executable, "-m", "llamay", "fleet", "scale", "1", "-url", cli_fleet.base, "-key", "k-admin"],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    (left,) = cli_fleet.wait_replicas(1, timeout=120)
    # Once the leaving replica has drained (after its in-flight requests), its contexts are
    # on the remaining one under their old ids.
    for cid, (_, tokens, prompt) in made.items():
        deadline = time.monotonic() + 60
        while True:
            got = httpx.get(cli_fleet.base + f"/v1/contexts/{cid}", headers=ALICE, timeout=30)
            if got.status_code == 200 and got.headers[REPLICA_HEADER] == left["replica"]:
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert got.status_code == 200, (cid, got.text, cli_fleet.log())
        assert got.headers[REPLICA_HEADER] == left["replica"]
        assert got.json()["tokens"] == tokens
        assert got.json()["id"] == cid  # the fleet-wide id, whatever the new replica calls it
        r = httpx.post(cli_fleet.base + "/v1/completions", headers=ALICE, timeout=60,
                       json={"prompt": prompt + "and more", "llamay_session": cid, "max_tokens": 2})  # fmt: skip
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] >= tokens - 1
    (now,) = cli_fleet.status()["replicas"]
    assert now["replica"] == left["replica"] and now["contexts"] >= len(made)

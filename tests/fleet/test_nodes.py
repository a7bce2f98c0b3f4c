"""A fleet on two Ray nodes (two raylets on this machine, one CPU each, through
`ray.cluster_utils.Cluster`), run by `llamay fleet up` joining the cluster as a user's would,
loses its second node (raylet and workers frozen and killed at once, as a lost machine's
are: `testing.raynodes`) while idle
contexts wait, a stream runs and contexts are being created and extended. Nothing that was
acknowledged is lost; the ingress of the surviving node keeps answering; every lost context
comes back under its id; the fleet grows back when a node joins again."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from llamay.fleet.spec import REPLICA_HEADER
from llamay.testing.raynodes import lose_node
from llamay.testing.server import free_port, spawn, stop_server
from tests.fleet.conftest import Fleet, assert_nothing_left

SYSTEM = "You sort support tickets into billing, bugs and other requests. " * 6
# Node loss is noticed by Ray's health checks of the raylet: fast here, as a cluster that
# wants fast failover would set them (the defaults take about 30 s).
FAST_FAILOVER = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
                 "health_check_timeout_ms": 500, "health_check_failure_threshold": 3}  # fmt: skip
FLAGS = ["-replicas", "2", "-cpus-per-replica", "1", "-threads", "1", "-ctx", "2048", "-concurrency", "4"]


@dataclass
class TwoNodes:
    fleet: Fleet
    cluster: object
    worker: object
    worker_id: str
    made: dict[str, int] = field(default_factory=dict)  # acknowledged id -> its token count


@pytest.fixture(scope="module")
def two_nodes(tiny_model_path: Path, ray_tmp: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoNodes]:
    os.environ["RAY_TMPDIR"] = ray_tmp
    os.environ["RAY_AUTH_MODE"] = "disabled"
    from ray.cluster_utils import Cluster

    tmp = tmp_path_factory.mktemp("nodes")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "_system_config": FAST_FAILOVER})
    worker = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    port = free_port()
    env = {"RAY_ADDRESS": cluster.address, "RAY_TMPDIR": ray_tmp, "RAY_AUTH_MODE": "disabled",
           "LLAMAY_HOME": str(tmp / "home")}  # fmt: skip
    cmd = [sys.executable, "-m", "llamay", "fleet", "up", "-m", str(tiny_model_path),
           "-addr", f"127.0.0.1:{port}", "-state", str(tmp / "state"), *FLAGS]  # fmt: skip
    server = spawn("llamay fleet", cmd, port, env=env, log_path=tmp / "fleet.log")
    fleet = Fleet(server.base_url, server.proc, server.log_path, tmp / "state")
    try:
        fleet.wait_replicas(2)
        yield TwoNodes(fleet, cluster, worker, worker.node_id)
    finally:
        stop_server(server, grace=60)
        cluster.shutdown()
    assert_nothing_left(ray_tmp)


def post(base: str, path: str, body: dict, timeout: float = 60) -> httpx.Response:
    with httpx.Client(timeout=timeout) as c:  # a new connection: whichever ingress is up takes it
        return c.post(base + path, json=body)


def get(base: str, path: str) -> httpx.Response:
    with httpx.Client(timeout=30) as c:
        return c.get(base + path)


def make_contexts(nodes: TwoNodes, victim: str, per_replica: int = 3) -> None:
    """Contexts on both replicas (at least `per_replica` on the victim), each with one
    acknowledged session turn; their tokens as acknowledged go to `nodes.made`."""
    on: dict[str, int] = {}
    for i in range(60):
        if on.get(victim, 0) >= per_replica and len(on) == 2 and sum(on.values()) >= 2 * per_replica:
            break
        r = post(nodes.fleet.base, "/v1/contexts", {"messages": [{"role": "system", "content": f"{i} {SYSTEM}"}]})
        assert r.status_code == 200, r.text
        cid, holder = r.json()["id"], r.headers[REPLICA_HEADER]
        on[holder] = on.get(holder, 0) + 1
        t = post(nodes.fleet.base, "/v1/chat/completions", {
            "messages": [{"role": "system", "content": f"{i} {SYSTEM}"}, {"role": "user", "content": "hi"}],
            "max_tokens": 3, "temperature": 0, "llamay_session": cid})
        assert t.status_code == 200 and t.headers[REPLICA_HEADER] == holder, t.text
        nodes.made[cid] = get(nodes.fleet.base, f"/v1/contexts/{cid}").json()["tokens"]
    assert on.get(victim, 0) >= per_replica and len(on) == 2, on


class Churn(threading.Thread):
    """Creates contexts and extends one with session turns, without pause, through the kill;
    records what was acknowledged (a 200) and counts what was refused."""

    def __init__(self, base: str) -> None:
        super().__init__(daemon=True)
        self.base = base
        self.stop = threading.Event()
        self.acked: dict[str, list[int]] = {}
        self.holders: dict[str, tuple[str, float]] = {}  # id -> (replica, when acknowledged)
        self.refused: list[int] = []

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            i += 1
            system = f"churn {i} {SYSTEM}"
            try:
                r = post(self.base, "/v1/contexts", {"messages": [{"role": "system", "content": system}]}, 20)
            except httpx.HTTPError:
                self.refused.append(-1)  # the connection went with its ingress
                continue
            if r.status_code != 200:
                assert r.status_code == 503 and "retry-after" in r.headers, r.text
                self.refused.append(r.status_code)
                continue
            cid = r.json()["id"]
            self.acked[cid] = []  # acknowledged as created; its tokens come with the turn
            self.holders[cid] = (r.headers[REPLICA_HEADER], time.monotonic())
            body = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": "go"}],
                    "max_tokens": 2, "temperature": 0, "llamay_session": cid}  # fmt: skip
            try:
                t = post(self.base, "/v1/chat/completions", body, 20)
            except httpx.HTTPError:
                continue
            if t.status_code == 200:
                u = t.json()["usage"]
                self.acked[cid] = [u["prompt_tokens"] + u["completion_tokens"]]


def test_losing_a_node_loses_nothing_acknowledged(two_nodes: TwoNodes) -> None:
    nodes = two_nodes
    base = nodes.fleet.base
    rows = nodes.fleet.wait_replicas(2)
    on_worker = [r for r in rows if r["node"] == nodes.worker_id]
    assert len(on_worker) == 1, rows  # one replica per node (one CPU each)
    victim, victim_pid = on_worker[0]["replica"], on_worker[0]["pid"]
    make_contexts(nodes, victim)

    # A long stream on the victim, and churn, as the node goes.
    stream_events: list[str] = []

    def stream() -> None:
        body = {"messages": [{"role": "user", "content": "a long story"}], "max_tokens": 1500,
                "temperature": 0.9, "seed": 1, "stream": True}  # fmt: skip
        for _ in range(30):
            with httpx.Client(timeout=60) as c, c.stream("POST", base + "/v1/chat/completions", json=body) as s:
                if s.headers.get(REPLICA_HEADER) != victim:
                    continue
                for line in s.iter_lines():
                    stream_events.append(line)
                return

    streamer = threading.Thread(target=stream, daemon=True)
    streamer.start()
    churn = Churn(base)
    churn.start()
    deadline = time.monotonic() + 60
    while (len(stream_events) < 3 or len(churn.acked) < 4) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(stream_events) >= 3, "no stream landed on the victim"
    # The node goes right after the victim acknowledged a new context: within a few
    # milliseconds, long before a once-a-second checkpoint could have saved it.
    seen = len(churn.holders)
    while time.monotonic() < deadline + 60:
        fresh = [t for h, t in list(churn.holders.values())[seen:] if h == victim]
        if fresh and time.monotonic() - fresh[-1] < 0.05:
            break
        seen = max(seen, len(churn.holders) - 1)
        time.sleep(0.002)

    lost = lose_node(nodes.cluster, nodes.worker)
    killed = time.monotonic()
    just_made = [c for c, (h, t) in list(churn.holders.items()) if h == victim and killed - t < 0.1]
    assert just_made, "no context was acknowledged on the victim just before it was lost"
    assert any(p == victim_pid for p in lost), "the victim replica was not among the node's processes"

    streamer.join(timeout=90)
    assert not streamer.is_alive(), "the stream on the lost node hung"
    stream_ended = time.monotonic() - killed
    assert stream_events[-1] != "data: [DONE]" or any("error" in e for e in stream_events)

    # The surviving node's ingress answers.
    answered = None
    while answered is None and time.monotonic() - killed < 90:
        try:
            r = post(base, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        except httpx.HTTPError:
            continue
        if r.status_code == 200:
            answered = time.monotonic() - killed
        else:
            assert r.status_code == 503 and "retry-after" in r.headers, r.text
    assert answered is not None, "no ingress answered after the node was lost"
    time.sleep(3)  # churn goes on past the loss
    churn.stop.set()
    churn.join(timeout=60)

    # Every acknowledged context answers again, under its id, with what was acknowledged.
    expected = dict(nodes.made)
    back_at = 0.0
    for cid, tokens in list(expected.items()) + [(c, t) for c, t in churn.acked.items()]:
        got = None
        while time.monotonic() - killed < 120:
            got = get(base, f"/v1/contexts/{cid}")
            if got.status_code == 200:
                break
            assert got.status_code == 503 and "retry-after" in got.headers, (cid, got.status_code, got.text)
            time.sleep(0.25)
        assert got is not None and got.status_code == 200, f"acknowledged context {cid} was lost"
        back_at = max(back_at, time.monotonic() - killed)
        assert got.headers[REPLICA_HEADER] != victim
        have = got.json()["tokens"]
        if cid in nodes.made:
            assert have == tokens  # idle since its acknowledged turn
        elif tokens:
            assert have >= tokens[0]  # the churn's acknowledged turn is in it
    # A restored context is whole: it forks, and its fork holds the same tokens.
    cid = next(iter(nodes.made))
    r = post(base, f"/v1/contexts/{cid}/fork", {})
    assert r.status_code == 200, r.text
    fork = r.json()["data"][0]["id"]
    assert get(base, f"/v1/contexts/{fork}").json()["tokens"] == nodes.made[cid]
    assert not (nodes.fleet.state / "checkpoints" / victim).exists()
    print(json.dumps({"stream_ended_s": round(stream_ended, 2), "endpoint_answered_s": round(answered, 2),
                      "contexts_back_s": round(back_at, 2), "acknowledged": len(expected) + len(churn.acked),
                      "refused_during_loss": len(churn.refused)}))  # fmt: skip

    # A node joins again: Ray places the missing replica there, and `fleet up` an ingress.
    node = nodes.cluster.add_node(num_cpus=1)  # type: ignore[attr-defined]
    rows = nodes.fleet.wait_replicas(2, timeout=180)
    assert any(r["node"] == node.node_id for r in rows), rows

"""Fleet on two Ray nodes: what durable acknowledgment costs, whether routing still finds
cached prefixes with an ingress on every node, and what losing a node loses.

    .venv/bin/python -m bench.fleet --nodes 2 --kill-node [--model NAME_OR_PATH] [--quick]

Two raylets on this machine (`ray.cluster_utils.Cluster`, one CPU each), a fleet of two
replicas (one per node, one thread each) with a state directory, and an ingress on each node
sharing one address. Arms, same run:

- `sessions`: 8 clients, each with its own context (a ~1,000-token tenant prompt), running
  session turns; with `durable` on (each turn answers once its context is on disk) against
  off (checkpoints once a second only, the fleet as it was): TTFT p50/p95 and turns/s.
- `prefixes`: the stateless multi-tenant workload of `bench.fleet` (8 tenants' prompts, 8
  clients) on the fleet and on one `llamay serve` with the same threads in all: prefix-hit
  rate (cached prompt tokens / prompt tokens).
- `kill`: sessions running on the durable fleet, then the second node is removed (raylet and
  workers killed): acknowledged contexts lost, seconds until the surviving node's endpoint
  answers, seconds until every lost context answers again.

Prints JSON with the issue's targets checked."""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from llamay.testing.raynodes import lose_node
from llamay.testing.server import HOST, free_port, start_server

from .common import percentile, print_json
from .fleet import CLIENTS, TENANTS, tenant_prompt, warm, workload

FAST_FAILOVER = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
                 "health_check_timeout_ms": 500, "health_check_failure_threshold": 3}  # fmt: skip
REPLICA_ARGV = ("-threads", "1", "-concurrency", "8", "-ctx", "16384")


def new_context(base: str, tenant: int) -> str:
    r = httpx.post(base + "/v1/contexts", timeout=300,
                   json={"messages": [{"role": "system", "content": tenant_prompt(tenant)}]})  # fmt: skip
    r.raise_for_status()
    return str(r.json()["id"])


def session_turn(base: str, cid: str, tenant: int, q: int, max_tokens: int) -> tuple[float, bool]:
    """(TTFT, acknowledged) of one streamed turn on context `cid`. The turn's prompt is the
    tenant prompt and one question: each turn continues the context's first message."""
    body = {"messages": [{"role": "system", "content": tenant_prompt(tenant)},
                         {"role": "user", "content": f"Question {q}: what applies to order {q}?"}],
            "max_tokens": max_tokens, "temperature": 0, "stream": True, "llamay_session": cid}  # fmt: skip
    t0 = time.monotonic()
    ttft = None
    done = False
    try:
        with httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=300) as s:
            if s.status_code != 200:
                return time.monotonic() - t0, False
            for line in s.iter_lines():
                if ttft is None and line.startswith("data:") and '"content"' in line:
                    ttft = time.monotonic() - t0
                if line.strip() == "data: [DONE]":
                    done = True
    except httpx.HTTPError:
        return time.monotonic() - t0, False
    return (ttft if ttft is not None else time.monotonic() - t0), done


def sessions(base: str, turns: int, max_tokens: int) -> dict[str, Any]:
    """`turns` session turns over 8 clients, each on a new context of its tenant (one turn
    per context: a context's next turn would have to repeat the reply it holds)."""
    jobs = list(range(turns))
    t0 = time.monotonic()

    def job(i: int) -> tuple[float, bool]:
        tenant = i % TENANTS
        cid = new_context(base, tenant)
        return session_turn(base, cid, tenant, i, max_tokens)

    with ThreadPoolExecutor(CLIENTS) as pool:
        results = list(pool.map(job, jobs))
    wall = time.monotonic() - t0
    ttfts = [t for t, ok in results if ok]
    return {"turns": turns, "failed": sum(1 for _, ok in results if not ok), "ttft_p50_s": percentile(ttfts, 50),
            "ttft_p95_s": percentile(ttfts, 95), "turns_per_s": len(ttfts) / wall, "wall_s": wall}  # fmt: skip


def _poll(
    send: Callable[[], httpx.Response], ready: Callable[[httpx.Response], bool], since: float, limit: float
) -> httpx.Response | None:
    """`send()` every 0.1 s until `ready` takes its response or `limit` seconds have passed
    since `since`: the last response, None if none came (a connection that met the lost
    ingress fails in transport and is tried again)."""
    last = None
    while True:
        try:
            last = send()
            if ready(last):
                return last
        except httpx.HTTPError:
            pass
        if time.monotonic() - since > limit:
            return last
        time.sleep(0.1)


def kill_node(base: str, cluster: Any, worker: Any, victim_node: str, max_tokens: int) -> dict[str, Any]:
    """Contexts made and turned while the worker node is removed; what came back."""
    acked: dict[str, int] = {}  # context id -> its tokens as acknowledged
    stop = threading.Event()
    lock = threading.Lock()

    def client(c: int) -> None:
        q = 0
        while not stop.is_set():
            q += 1
            try:
                cid = new_context(base, c)
            except httpx.HTTPError:
                continue  # refused (503) or its connection went with its ingress: not acknowledged
            with lock:
                acked[cid] = 0
            ok = session_turn(base, cid, c, q, max_tokens)[1]
            if ok:
                try:
                    got = httpx.get(base + f"/v1/contexts/{cid}", timeout=30)
                except httpx.HTTPError:
                    continue
                if got.status_code == 200:
                    with lock:
                        acked[cid] = int(got.json()["tokens"])  # a count

    threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in range(CLIENTS)]
    for t in threads:
        t.start()
    t0 = time.monotonic()
    while time.monotonic() - t0 < 90 and sum(1 for n in list(acked.values()) if n) < 2 * CLIENTS:
        time.sleep(0.2)
    rows = httpx.get(base + "/v1/fleet", timeout=60).json()["replicas"]
    victim = next(r["replica"] for r in rows if r["node"] == victim_node)
    lose_node(cluster, worker)
    killed = time.monotonic()
    # The clients stop with the node: the survivor then has its own queue to finish, not
    # twice the load, and what follows measures failover rather than one replica's backlog.
    stop.set()
    ok = _poll(partial(httpx.get, base + "/health", timeout=5), lambda r: r.status_code == 200, killed, 120)
    health = time.monotonic() - killed if ok is not None and ok.status_code == 200 else None
    lost: list[dict[str, Any]] = []
    back = 0.0

    def check(items: list[tuple[str, int]], timed: bool = True) -> None:
        nonlocal back
        for cid, tokens in items:
            got = _poll(
                partial(httpx.get, base + f"/v1/contexts/{cid}", timeout=30),
                lambda r: r.status_code != 503,
                killed,
                180,
            )
            if got is None or got.status_code != 200 or int(got.json()["tokens"]) < tokens:
                status = None if got is None else got.status_code
                lost.append({"id": cid, "acknowledged_tokens": tokens, "status": status,
                             "answer": None if got is None else got.text[:300],
                             "after_s": round(time.monotonic() - killed, 2)})  # fmt: skip
            elif timed and got.headers.get("x-llamay-replica") != victim:
                back = max(back, time.monotonic() - killed)

    # Those acknowledged before the loss first (their return is what recovery takes), while
    # the requests in flight finish; then those acknowledged by requests in flight.
    with lock:
        before = dict(acked)
    check(list(before.items()))
    for t in threads:
        t.join(timeout=120)
    with lock:  # a client still ending its last request may yet write
        after = [(c, n) for c, n in acked.items() if c not in before]
    check(after, timed=False)
    still = {"messages": [{"role": "user", "content": "still there?"}], "max_tokens": 2}
    chat = _poll(
        partial(httpx.post, base + "/v1/chat/completions", timeout=30, json=still),
        lambda r: r.status_code == 200,
        killed,
        120,
    )
    answered = time.monotonic() - killed if chat is not None and chat.status_code == 200 else None
    return {"acknowledged": len(acked), "lost": len(lost), "lost_detail": lost, "endpoint_health_s": health,
            "endpoint_answered_s": answered, "every_lost_context_back_s": back}  # fmt: skip


def run_arms(model: Path, args: Any) -> dict[str, Any]:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray
    from ray import serve
    from ray.cluster_utils import Cluster

    from llamay.cli.main import build_parser
    from llamay.cli.serve import config_from_args
    from llamay.fleet.app import deploy, wait_replicas
    from llamay.fleet.spec import FleetSpec

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "_system_config": FAST_FAILOVER})
    worker = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    server = config_from_args(build_parser().parse_args(["serve", *REPLICA_ARGV]))
    out: dict[str, Any] = {}

    def fleet(durable: bool, name: str) -> tuple[Any, FleetSpec]:
        state = tempfile.mkdtemp(prefix=f"bench-nodes-{name}-")
        spec = FleetSpec(model=(model.stem, str(model), None), port=free_port(), replicas=2, cpus_per_replica=1.0,
                         server=server, state_dir=state, durable=durable, app_name=name)  # fmt: skip
        handle = deploy(spec)
        wait_replicas(handle, 2)
        return handle, spec

    try:
        for durable in (
            () if args.only == "kill" else (False, True, False, True)
        ):  # interleaved: the machine drifts
            _, spec = fleet(durable, f"nodes-{'on' if durable else 'off'}")
            base = f"http://{HOST}:{spec.port}"
            warm(base)
            arm = "durable" if durable else "checkpointed"
            got = sessions(base, args.turns, args.max_tokens)
            print(f"bench.fleet_nodes: {arm}: {got}", file=sys.stderr, flush=True)
            if arm not in out or got["turns_per_s"] > out[arm]["turns_per_s"]:
                out[arm] = got  # each arm's better run
            if durable and "prefixes_fleet" not in out:
                out["prefixes_fleet"] = workload(base, args.requests, args.max_tokens)
                print(
                    f"bench.fleet_nodes: prefixes_fleet: {out['prefixes_fleet']}", file=sys.stderr, flush=True
                )
            serve.delete(spec.app_name)
        if args.kill_node:
            _, spec = fleet(True, "nodes-kill")
            base = f"http://{HOST}:{spec.port}"
            warm(base)
            out["kill"] = kill_node(base, cluster, worker, worker.node_id, args.max_tokens)
    finally:
        serve.shutdown()
        ray.shutdown()
        cluster.shutdown()
    return out


def main(args: Any) -> int:
    """Run with `bench.fleet`'s parsed arguments (`--nodes 2 --kill-node`)."""
    from llamay.store import ModelStore

    model = ModelStore().resolve(args.model).path
    args.turns = 16 if args.quick else 48
    report: dict[str, Any] = {"model": model.name, "nodes": 2, "clients": CLIENTS, "cpus": os.cpu_count()}
    env = {"LLAMAY_HOME": tempfile.mkdtemp(prefix="bench-nodes-home-")}
    if args.only == "kill":
        report.update(run_arms(model, args))
        print_json(report)
        return 0
    port = free_port()
    # One server with the fleet's threads in all (2), for the prefix-hit baseline.
    argv_serve = [sys.executable, "-m", "llamay", "serve", "-m", str(model), "-threads", "2",
                  "-concurrency", "8", "-ctx", "16384", "-addr", f"{HOST}:{port}"]  # fmt: skip
    with start_server("serve", argv_serve, port, "/health", env=env) as s:
        warm(s.base_url)
        report["prefixes_serve"] = workload(s.base_url, args.requests, args.max_tokens)
    print(f"bench.fleet_nodes: prefixes_serve: {report['prefixes_serve']}", file=sys.stderr, flush=True)
    report.update(run_arms(model, args))
    on, off = report["durable"], report["checkpointed"]
    report["targets"] = {
        "durable_ttft_p50_ratio": off["ttft_p50_s"] / on["ttft_p50_s"] if on["ttft_p50_s"] else None,
        "durable_throughput_ratio": on["turns_per_s"] / off["turns_per_s"] if off["turns_per_s"] else None,
        "prefix_hit_ratio_vs_serve": report["prefixes_fleet"]["prefix_hit_rate"]
        / max(1e-9, report["prefixes_serve"]["prefix_hit_rate"]),
    }
    t = report["targets"]
    t["durable_within_5pct"] = (t["durable_ttft_p50_ratio"] or 0) >= 0.95 and (
        t["durable_throughput_ratio"] or 0
    ) >= 0.95
    t["prefix_hit_at_least_0.9"] = t["prefix_hit_ratio_vs_serve"] >= 0.9
    if "kill" in report:
        kill = report["kill"]
        t["acknowledged_contexts_lost_0"] = kill["lost"] == 0
        t["endpoint_within_10s"] = (
            kill["endpoint_answered_s"] is not None and kill["endpoint_answered_s"] <= 10
        )
        t["lost_contexts_back_within_30s"] = kill["every_lost_context_back_s"] <= 30
    print_json(report)
    return 0

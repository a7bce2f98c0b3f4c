"""Fleet benchmark: one `llamay serve` against a fleet of 2 replicas on Ray Serve, with our
router and with Ray Serve's default router, on the same multi-tenant workload.

    .venv/bin/python -m bench.fleet [--model NAME_OR_PATH] [--requests N] [--quick]
    .venv/bin/python -m bench.fleet --nodes 2 [--kill-node] [...]   # bench/fleet_nodes.py

Workload: 8 tenants, each with its own ~1,000-token system prompt, 8 concurrent clients; each
request is one tenant's system prompt plus a short question, streamed, greedy. Reported per
arm: TTFT p50/p95, prefix-cache hit rate (cached prompt tokens / prompt tokens), throughput;
the ingress hop alone (a 1-token request, one at a time, fleet of 1 vs serve with the same
threads); and for the fleet with our router, the time from killing a replica to the next good
answer. Prints JSON. The fleet's replicas get 1 thread each, the single server 2."""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from llamay.testing.server import HOST, free_port, start_server

from .common import DONE, BadEvent, percentile, print_json, sse_data, sse_event

TENANTS = 8
CLIENTS = 8
FLEET_REPLICA_ARGV = ("-threads", "1", "-concurrency", "8", "-ctx", "16384")
WORDS = ["invoice", "refund", "shipment", "warranty", "account", "password", "delivery", "order"]


def tenant_prompt(t: int, words: int = 345) -> str:
    rng = random.Random(t)
    body = " ".join(rng.choice(WORDS) + str(rng.randrange(100)) for _ in range(words))
    return f"You are the assistant of tenant {t}. Policies follow. {body}"


@dataclass
class Result:
    ttft: float
    total: float
    prompt: int
    cached: int
    ok: bool


def one(base: str, tenant: int, q: int, max_tokens: int) -> Result:
    body = {
        "messages": [{"role": "system", "content": tenant_prompt(tenant)},
                     {"role": "user", "content": f"Question {q}: what applies to order {q}?"}],
        "max_tokens": max_tokens, "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True},
    }  # fmt: skip
    t0 = time.monotonic()
    ttft = None
    usage: dict[str, Any] = {}
    try:
        with httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=600) as s:
            if s.status_code != 200:
                return Result(0, 0, 0, 0, False)
            for line in s.iter_lines():
                data = sse_data(line)
                if data is None or data == DONE:
                    continue
                event = sse_event(data)
                # The first chunk naming content (the role chunk, with content ""): when the
                # stream started, as every arm of this benchmark has measured it.
                if ttft is None and any("content" in (c.get("delta") or {}) for c in event.get("choices") or []):
                    ttft = time.monotonic() - t0
                usage = event.get("usage") or usage
    except (httpx.HTTPError, BadEvent):
        return Result(0, 0, 0, 0, False)
    total = time.monotonic() - t0
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return Result(ttft if ttft is not None else total, total, usage.get("prompt_tokens", 0), cached, True)


def workload(base: str, requests: int, max_tokens: int) -> dict[str, Any]:
    # Client c asks for tenants in its own shuffled order: every tenant recurs, interleaved.
    jobs = [(i % TENANTS, i) for i in range(requests)]
    random.Random(7).shuffle(jobs)
    t0 = time.monotonic()
    with ThreadPoolExecutor(CLIENTS) as pool:
        results = list(pool.map(lambda j: one(base, j[0], j[1], max_tokens), jobs))
    wall = time.monotonic() - t0
    good = [r for r in results if r.ok]
    ttfts = [r.ttft for r in good]
    return {
        "requests": len(results),
        "failed": len(results) - len(good),
        "ttft_p50_s": percentile(ttfts, 50),
        "ttft_p95_s": percentile(ttfts, 95),
        "prefix_hit_rate": sum(r.cached for r in good) / max(1, sum(r.prompt for r in good)),
        "requests_per_s": len(good) / wall,
        "wall_s": wall,
    }


def hop(base: str, n: int = 30) -> dict[str, float]:
    """TTFT of a tiny request, one at a time: what a hop adds, without queueing. One client
    for all (a new httpx client per request costs ~25 ms of its own, mostly its TLS setup,
    which drowned the difference being measured)."""
    times = []
    with httpx.Client(timeout=60) as client:
        for i in range(n):
            t0 = time.monotonic()
            r = client.post(base + "/v1/chat/completions",
                            json={"messages": [{"role": "user", "content": f"hi {i}"}], "max_tokens": 1})  # fmt: skip
            r.raise_for_status()
            times.append(time.monotonic() - t0)
    return {"p50_s": percentile(times, 50), "p95_s": percentile(times, 95)}


def warm(base: str) -> None:
    for _ in range(3):
        httpx.post(base + "/v1/chat/completions", timeout=120,
                   json={"messages": [{"role": "user", "content": "warm"}], "max_tokens": 1})  # fmt: skip


def kill_to_next_good_answer(base: str) -> float:
    rows = httpx.get(base + "/v1/fleet", timeout=60).json()["replicas"]
    os.kill(rows[0]["pid"], signal.SIGKILL)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 120:
        try:
            r = httpx.post(base + "/v1/chat/completions", timeout=30,
                           json={"messages": [{"role": "user", "content": "still there?"}], "max_tokens": 2})  # fmt: skip
            if r.status_code == 200:
                return time.monotonic() - t0
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    return float("inf")


def run_fleet_arm(
    model: Path, router: str, replicas: int, args: argparse.Namespace, kill: bool
) -> dict[str, Any]:
    from ray import serve

    from llamay.cli.main import build_parser
    from llamay.cli.serve import config_from_args
    from llamay.fleet.app import deploy, wait_replicas
    from llamay.fleet.spec import FleetSpec

    port = free_port()
    server = config_from_args(build_parser().parse_args(["serve", *FLEET_REPLICA_ARGV]))  # as that serve runs
    spec = FleetSpec(model=(model.stem, str(model), None), port=port, replicas=replicas, cpus_per_replica=1.0,
                     router=router, server=server,
                     app_name=f"bench-{router}-{replicas}")  # fmt: skip
    handle = deploy(spec)
    try:
        wait_replicas(handle, replicas)
        base = f"http://{HOST}:{port}"
        warm(base)
        out: dict[str, Any] = {"hop_ttft": hop(base)} if replicas == 1 else {}
        if replicas > 1:
            out.update(workload(base, args.requests, args.max_tokens))
            if kill:
                out["kill_to_next_good_answer_s"] = kill_to_next_good_answer(base)
        return out
    finally:
        serve.delete(spec.app_name)
        serve.shutdown()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.fleet", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="model name or .gguf path (default: llamay's default)")
    p.add_argument("--requests", type=int, default=48, help="requests per arm (default 48)")
    p.add_argument("--max-tokens", dest="max_tokens", type=int, default=16)
    p.add_argument("--quick", action="store_true", help="16 requests per arm")
    p.add_argument("--nodes", type=int, default=1, choices=[1, 2],
                   help="2: a two-node cluster on this machine (bench.fleet_nodes)")  # fmt: skip
    p.add_argument("--kill-node", dest="kill_node", action="store_true",
                   help="with --nodes 2: remove the second node under load")  # fmt: skip
    p.add_argument("--only", default="", choices=["", "kill"], help="with --nodes 2: kill: only the node loss")
    args = p.parse_args(argv)
    if args.quick:
        args.requests = 16
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.nodes == 2:
        from . import fleet_nodes

        return fleet_nodes.main(args)
    from llamay.store import ModelStore

    model = ModelStore().resolve(args.model).path
    report: dict[str, Any] = {"model": model.name, "tenants": TENANTS, "clients": CLIENTS,
                              "requests_per_arm": args.requests, "cpus": os.cpu_count()}  # fmt: skip
    serve_argv = [sys.executable, "-m", "llamay", "serve", "-m", str(model), "-threads", "2",
                  "-concurrency", "8", "-ctx", "16384"]  # fmt: skip
    # Servers of their own home: another llamay on this machine may hold the default one.
    env = {"LLAMAY_HOME": tempfile.mkdtemp(prefix="bench-fleet-home-")}
    port = free_port()
    with start_server("serve", [*serve_argv, "-addr", f"{HOST}:{port}"], port, "/health", env=env) as s:
        warm(s.base_url)
        report["serve"] = workload(s.base_url, args.requests, args.max_tokens)
    port = free_port()
    # The hop's baseline runs exactly as a fleet replica does (1 thread, same -ctx and
    # -concurrency): only the hop differs.
    one_thread = [*serve_argv[:-6], *FLEET_REPLICA_ARGV]
    with start_server("serve-1t", [*one_thread, "-addr", f"{HOST}:{port}"], port, "/health", env=env) as s:
        warm(s.base_url)
        report["serve_1_thread_hop_ttft"] = hop(s.base_url)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    from llamay.fleet.app import start_ray

    start_ray(num_cpus=2)
    try:
        report["fleet1_hop_ttft"] = run_fleet_arm(model, "llamay", 1, args, kill=False)["hop_ttft"]
        report["fleet2_llamay_router"] = run_fleet_arm(model, "llamay", 2, args, kill=True)
        report["fleet2_ray_router"] = run_fleet_arm(model, "ray", 2, args, kill=False)
    finally:
        ray.shutdown()
    a, f1 = report["serve_1_thread_hop_ttft"], report["fleet1_hop_ttft"]
    report["ingress_added_ttft_ms"] = {"p50": 1000 * (f1["p50_s"] - a["p50_s"]),
                                       "p95": 1000 * (f1["p95_s"] - a["p95_s"])}  # fmt: skip
    report["fleet2_vs_serve_ttft_ms"] = {
        "p50": 1000 * (report["fleet2_llamay_router"]["ttft_p50_s"] - report["serve"]["ttft_p50_s"]),
        "p95": 1000 * (report["fleet2_llamay_router"]["ttft_p95_s"] - report["serve"]["ttft_p95_s"]),
    }
    print_json(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())

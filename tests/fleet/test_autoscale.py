"""Autoscaling on a live fleet (min 1, max 2, one request per replica as the target): load
adds a replica, idleness takes it away again, and the contexts on the leaving replica are
moved, not lost. Ray's decision delays are cut to seconds so this stays short."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llamay.config import RuntimeConfig, ServerConfig
from llamay.fleet.spec import REPLICA_HEADER, FleetSpec
from tests.fleet.conftest import assert_nothing_left
from tests.serverproc import free_port

# Handles and replicas report load to Ray's autoscaler every 10 s by default.
FAST_METRICS = {
    "RAY_SERVE_HANDLE_AUTOSCALING_METRIC_PUSH_INTERVAL_S": "0.5",
    "RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S": "0.5",
}


@pytest.fixture(scope="module")
def base(tiny_model_path: Path, ray_tmp: str) -> Iterator[str]:
    os.environ["RAY_AUTH_MODE"] = "disabled"
    import ray
    from ray import serve

    from llamay.fleet.app import deploy, start_ray

    port = free_port()
    spec = FleetSpec(
        model=("tiny", str(tiny_model_path), None),
        server=ServerConfig(runtime=RuntimeConfig(threads=1, ctx=2048, concurrency=4)),
        app_name="auto",
        port=port,
        replicas=1,
        min_replicas=1,
        max_replicas=2,
        target_ongoing=1,
        cpus_per_replica=0.5,
        upscale_delay=1.0,
        downscale_delay=3.0,
        look_back=2.0,
    )
    start_ray(num_cpus=2, temp_dir=ray_tmp, env=FAST_METRICS)
    try:
        handle = deploy(spec)
        yield f"http://127.0.0.1:{port}"
        handle.prepare_down.remote().result(timeout_s=30)
    finally:
        serve.shutdown()
        ray.shutdown()
    assert_nothing_left(ray_tmp)


def replicas(base: str) -> list[dict[str, Any]]:
    try:
        rows: list[dict[str, Any]] = httpx.get(base + "/v1/fleet", timeout=30).json()["replicas"]
    except (httpx.HTTPError, ValueError, KeyError):
        return []
    return [r for r in rows if "error" not in r]


def wait_for(base: str, n: int, timeout: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = replicas(base)
        if len(rows) == n:
            return rows
        time.sleep(0.5)
    raise AssertionError(f"not {n} replicas after {timeout}s: {replicas(base)}")


def test_load_adds_a_replica_and_idleness_removes_it_keeping_contexts(base: str) -> None:
    wait_for(base, 1, 120)
    stop = threading.Event()

    def load() -> None:
        body = {
            "messages": [{"role": "user", "content": "a long story"}],
            "max_tokens": 200,
            "temperature": 0.9,
        }
        while not stop.is_set():
            with contextlib.suppress(httpx.HTTPError):
                httpx.post(base + "/v1/chat/completions", json=body, timeout=60)

    clients = [threading.Thread(target=load) for _ in range(4)]
    for c in clients:
        c.start()
    try:
        rows = wait_for(base, 2, 60)
        # Contexts on both replicas, so whichever leaves has some to move.
        made: dict[str, tuple[str, int]] = {}
        for i in range(30):
            r = httpx.post(
                base + "/v1/contexts", timeout=60, json={"prompt": f"minutes of meeting {i} " * 10}
            )
            assert r.status_code == 200, r.text
            made[r.json()["id"]] = (r.headers[REPLICA_HEADER], r.json()["tokens"])
            if len({h for h, _ in made.values()}) == 2:
                break
        assert {h for h, _ in made.values()} == {r["replica"] for r in rows}
    finally:
        stop.set()
        for c in clients:
            c.join()
    (left,) = wait_for(base, 1, 60)
    for cid, (_, tokens) in made.items():
        deadline = time.monotonic() + 30
        while (got := httpx.get(base + f"/v1/contexts/{cid}", timeout=30)).status_code != 200:
            assert time.monotonic() < deadline, (cid, got.status_code, got.text)
            time.sleep(0.5)
        assert got.headers[REPLICA_HEADER] == left["replica"]
        assert got.json()["id"] == cid and got.json()["tokens"] == tokens

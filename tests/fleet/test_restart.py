"""A fleet going down and a new one started on the same state directory: the contexts the
first one held come back on the second under the same ids, as they were at the end. The
first fleet runs Ray Serve's default router (`-router ray`), whose `/v1/fleet` must list its
replicas as ours does."""

from __future__ import annotations

import os
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

SYSTEM = "You keep the minutes of a gardening club. Note every decision. " * 8


@pytest.fixture(scope="module")
def cluster(ray_tmp: str) -> Iterator[None]:
    os.environ["RAY_AUTH_MODE"] = "disabled"
    import ray
    from ray import serve

    from llamay.fleet.app import start_ray

    start_ray(num_cpus=2, temp_dir=ray_tmp)
    try:
        yield
    finally:
        serve.shutdown()
        ray.shutdown()
    assert_nothing_left(ray_tmp)


def spec_of(model: Path, state: Path, port: int, app: str, router: str) -> FleetSpec:
    return FleetSpec(
        model=("tiny", str(model), None),
        server=ServerConfig(runtime=RuntimeConfig(threads=1, ctx=2048, concurrency=4)),
        app_name=app,
        port=port,
        replicas=2,
        cpus_per_replica=0.5,
        state_dir=str(state),
        router=router,
    )


def fleet_rows(base: str, n: int, timeout: float = 180.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    rows: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        try:
            rows = httpx.get(base + "/v1/fleet", timeout=30).json()["replicas"]
        except (httpx.HTTPError, ValueError, KeyError):
            rows = []
        if len(rows) == n and all("error" not in r for r in rows):
            return rows
        time.sleep(0.5)
    raise AssertionError(f"/v1/fleet lists {rows}, not {n} replicas")


def test_a_new_fleet_on_the_same_state_directory_restores_the_contexts(
    cluster: None, tiny_model_path: Path, tmp_path: Path
) -> None:
    from ray import serve

    from llamay.fleet.app import deploy

    state = tmp_path / "state"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    first = deploy(spec_of(tiny_model_path, state, port, "first", "ray"))
    # Ray's default router: /v1/fleet lists both replicas, each row from the replica it names.
    rows = fleet_rows(base, 2)
    assert len({r["replica"] for r in rows}) == 2 and len({r["pid"] for r in rows}) == 2
    made: dict[str, int] = {}
    for i in range(6):
        r = httpx.post(base + "/v1/contexts", timeout=60,
                       json={"messages": [{"role": "system", "content": f"{SYSTEM} Meeting {i}."}]})  # fmt: skip
        assert r.status_code == 200, r.text
        made[r.json()["id"]] = r.json()["tokens"]
    # `fleet down`: replicas keep their contexts (no moving between replicas that all stop).
    first.prepare_down.remote().result(timeout_s=30)
    serve.delete("first")
    assert sum(1 for _ in (state / "checkpoints").glob("*/*.llamayctx")) == len(made)

    second = deploy(spec_of(tiny_model_path, state, port, "second", "llamay"))
    fleet_rows(base, 2)
    for cid, tokens in made.items():
        deadline = time.monotonic() + 60
        while True:
            got = httpx.get(base + f"/v1/contexts/{cid}", timeout=30)
            if got.status_code != 503 or time.monotonic() > deadline:
                break
            assert "retry-after" in got.headers
            time.sleep(0.5)
        assert got.status_code == 200, got.text
        assert got.json()["id"] == cid and got.json()["tokens"] == tokens
    # A session on a restored context runs on its holder, from the restored KV.
    cid, tokens = next(iter(made.items()))
    holder = httpx.get(base + f"/v1/contexts/{cid}", timeout=30).headers[REPLICA_HEADER]
    r = httpx.post(base + "/v1/chat/completions", timeout=60,
                   json={"messages": [{"role": "system", "content": f"{SYSTEM} Meeting 0."},
                                      {"role": "user", "content": "what was decided?"}],
                         "max_tokens": 3, "llamay_session": cid})  # fmt: skip
    assert r.status_code == 200, r.text
    assert r.headers[REPLICA_HEADER] == holder
    assert r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] >= tokens - 1
    listed = {c["id"] for c in httpx.get(base + "/v1/contexts", timeout=30).json()["data"]}
    assert set(made) <= listed
    # The first fleet's replicas left nothing behind once their contexts were restored.
    gone = {p.name for p in (state / "replicas").iterdir()} - {r["replica"] for r in fleet_rows(base, 2)}
    assert not gone, gone
    second.prepare_down.remote().result(timeout_s=30)  # as `fleet down` does: no moves
    serve.delete("second")

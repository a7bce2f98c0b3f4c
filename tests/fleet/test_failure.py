"""A replica killed mid-traffic (SIGKILL, no goodbye): its stream ends with an error event,
nothing hangs, the survivor keeps answering, and the contexts it had checkpointed under the
fleet's state directory come back on another replica under the same ids."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from llamay.config import RuntimeConfig, ServerConfig
from llamay.fleet.spec import REPLICA_HEADER, FleetSpec
from tests.fleet.conftest import Fleet, assert_nothing_left
from tests.serverproc import free_port

SYSTEM = "You sort support tickets into billing, bugs and other requests. " * 8


@pytest.fixture(scope="module")
def fleet(tiny_model_path: Path, ray_tmp: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """A fleet driven from this process (so the test can see and kill replica processes)."""
    os.environ["RAY_AUTH_MODE"] = "disabled"
    import ray
    from ray import serve

    from llamay.fleet.app import deploy, start_ray

    state = tmp_path_factory.mktemp("state")
    port = free_port()
    spec = FleetSpec(
        model=("tiny", str(tiny_model_path), None),
        server=ServerConfig(runtime=RuntimeConfig(threads=1, ctx=2048, concurrency=4)),
        port=port,
        replicas=2,
        cpus_per_replica=0.5,
        state_dir=str(state),
    )
    start_ray(num_cpus=2, temp_dir=ray_tmp)
    try:
        deploy(spec)
        f = Fleet(f"http://127.0.0.1:{port}", None, state / "none.log", state)
        f.wait_replicas(2)
        yield f
    finally:
        serve.shutdown()
        ray.shutdown()
    assert_nothing_left(ray_tmp)


def make_context(fleet: Fleet, on: str | None = None) -> tuple[str, str]:
    for _ in range(20):
        r = httpx.post(fleet.base + "/v1/contexts", json={"messages": [{"role": "system", "content": SYSTEM}]},
                       timeout=60)  # fmt: skip
        assert r.status_code == 200, r.text
        if on is None or r.headers[REPLICA_HEADER] == on:
            return r.json()["id"], r.headers[REPLICA_HEADER]
    raise AssertionError(f"no context landed on {on}")


def turn(cid: str, n: int) -> list[dict]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"ticket {n}: refund please"}]


def test_killed_replica_fails_cleanly_and_its_contexts_come_back(fleet: Fleet) -> None:
    rows = fleet.wait_replicas(2)
    victim, survivor = rows[0], rows[1]
    cid, holder = make_context(fleet, on=victim["replica"])
    r = httpx.post(fleet.base + "/v1/chat/completions", timeout=60,
                   json={"messages": turn(cid, 1), "max_tokens": 4, "temperature": 0, "llamay_session": cid})  # fmt: skip
    assert r.status_code == 200 and r.headers[REPLICA_HEADER] == holder
    tokens = httpx.get(fleet.base + f"/v1/contexts/{cid}", timeout=30).json()["tokens"]
    ckpt = fleet.state / "checkpoints" / holder / f"{cid}.llamayctx"
    deadline = time.monotonic() + 10
    while not ckpt.is_file() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ckpt.is_file(), "the checkpointer did not write the context"
    time.sleep(2.5)  # past the checkpoint interval: the session's turn is in the checkpoint
    # A long stream on the victim, killed after its first event.
    body = {"messages": [{"role": "user", "content": "a long story"}], "max_tokens": 1500, "temperature": 0.9,
            "seed": 3, "stream": True}  # fmt: skip
    events: list[str] = []
    for _ in range(20):  # land a stream on the victim (two choices pick it about half the time)
        with httpx.stream("POST", fleet.base + "/v1/chat/completions", json=body, timeout=60) as s:
            if s.headers[REPLICA_HEADER] != holder:
                continue
            lines = s.iter_lines()
            events.append(next(lines))
            os.kill(victim["pid"], signal.SIGKILL)
            killed = time.monotonic()
            events += list(lines)  # must end (httpx's 60 s read timeout would fail the test)
            break
    assert events, "no stream landed on the victim"
    ended = time.monotonic() - killed
    assert ended < 30
    assert any(e.startswith("event: error") for e in events) or events[-1] != "data: [DONE]", events[-5:]
    # The survivor keeps answering; a request may meet the dead replica before Ray drops
    # it, and then gets a clean 503 with Retry-After, never a hang.
    good = None
    while good is None and time.monotonic() - killed < 60:
        r = httpx.post(fleet.base + "/v1/chat/completions", timeout=30,
                       json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})  # fmt: skip
        if r.status_code == 200:
            good = time.monotonic() - killed
        else:
            assert r.status_code == 503 and "retry-after" in r.headers, r.text
    assert good is not None
    # The checkpointed context is restored on a live replica, under the same id, as it was.
    restored = None
    while time.monotonic() - killed < 90:
        got = httpx.get(fleet.base + f"/v1/contexts/{cid}", timeout=30)
        if got.status_code == 200 and got.headers[REPLICA_HEADER] != holder:
            restored = got
            break
        assert got.status_code in (200, 404, 503), got.text
        time.sleep(0.5)
    assert restored is not None, "the dead replica's context did not come back"
    back = time.monotonic() - killed
    assert restored.json()["tokens"] == tokens
    r = httpx.post(fleet.base + "/v1/chat/completions", timeout=60,
                   json={"messages": turn(cid, 1) + [{"role": "assistant", "content": "ok"},
                                                     {"role": "user", "content": "thanks"}],
                         "max_tokens": 3, "llamay_session": cid})  # fmt: skip
    assert r.status_code in (200, 409), r.text
    assert r.headers[REPLICA_HEADER] == restored.headers[REPLICA_HEADER]
    assert not (fleet.state / "checkpoints" / holder).exists()
    print(f"kill -> stream ended {ended:.2f}s, next good answer {good:.2f}s, context back {back:.1f}s "
          f"(survivor {survivor['replica']})")  # fmt: skip

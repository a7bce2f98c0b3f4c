"""Fleet tests run a real local Ray cluster (2 CPUs, two replicas of the tiny model at half a
CPU each) and real HTTP. Each module starts one fleet and checks, at the end, that nothing it
started is left running."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from llamay.testing import write_tiny_llama
from llamay.testing.server import free_port, spawn, stop_server

KEYS = {
    "keys": [
        {"key": "k-admin", "principal": "root", "role": "admin"},
        {"key": "k-alice", "principal": "alice"},
        {"key": "k-bob", "principal": "bob"},
    ]
}
ADMIN = {"Authorization": "Bearer k-admin"}
ALICE = {"Authorization": "Bearer k-alice"}
BOB = {"Authorization": "Bearer k-bob"}
REPLICA_FLAGS = ["-cpus-per-replica", "0.5", "-threads", "1", "-ctx", "2048", "-concurrency", "4"]


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("tiny-model") / "tiny-llama.gguf")


def processes_under(marker: str) -> list[int]:
    """Pids of processes whose command line mentions `marker` (the cluster's temp dir)."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd:
            found.append(int(d.name))
    return found


def assert_nothing_left(marker: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while (left := processes_under(marker)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, f"processes left running: {left}"


@dataclass
class Fleet:
    base: str
    proc: subprocess.Popen[bytes] | None
    log_path: Path
    state: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]

    def status(self) -> dict:
        r = httpx.get(self.base + "/v1/fleet", headers=ADMIN, timeout=60)
        assert r.status_code == 200, r.text
        return r.json()

    def wait_replicas(self, n: int, timeout: float = 180.0) -> list[dict]:
        deadline = time.monotonic() + timeout
        rows: list[dict] = []
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"fleet exited with {self.proc.returncode}:\n{self.log()}")
            try:
                rows = self.status()["replicas"]
            except (httpx.HTTPError, AssertionError):
                rows = []
            if len(rows) == n and all("error" not in r for r in rows):
                return rows
            time.sleep(0.5)
        raise RuntimeError(f"fleet has {rows} not {n} replicas after {timeout}s:\n{self.log()}")


@pytest.fixture(scope="module")
def ray_tmp() -> Iterator[str]:
    # Short: Ray's unix sockets live under it and their paths are length-limited.
    path = tempfile.mkdtemp(prefix="lfr", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def cli_fleet(
    tiny_model_path: Path, ray_tmp: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Fleet]:
    """`llamay fleet up` as a user runs it (a subprocess owning a local Ray cluster), with API
    keys and a state directory; stopped with `llamay fleet down`."""
    tmp = tmp_path_factory.mktemp("fleet")
    keys = tmp / "keys.json"
    keys.write_text(json.dumps(KEYS))
    port = free_port()
    env = {"RAY_TMPDIR": ray_tmp, "LLAMAY_HOME": str(tmp / "home"), "RAY_AUTH_MODE": "disabled"}
    cmd = [sys.executable, "-m", "llamay", "fleet", "up", "-replicas", "2", "-m", str(tiny_model_path),
           "-addr", f"127.0.0.1:{port}", "-keys", str(keys), "-state", str(tmp / "state"),
           "-ray-cpus", "2", *REPLICA_FLAGS]  # fmt: skip
    server = spawn("llamay fleet", cmd, port, env=env, log_path=tmp / "fleet.log")
    fleet = Fleet(server.base_url, server.proc, server.log_path, tmp / "state")
    try:
        fleet.wait_replicas(2)
        yield fleet
    finally:
        # No -host: `fleet down` finds the fleet this home's `fleet up` recorded.
        clean = {k: v for k, v in os.environ.items() if k not in ("LLAMAY_HOST", "LLAMAY_URL")}
        down = subprocess.run([sys.executable, "-m", "llamay", "fleet", "down", "-key", "k-admin"],
                              capture_output=True, env={**clean, **env}, timeout=60)  # fmt: skip
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.proc.wait(timeout=90)  # `fleet down` ends it
        stop_server(server, grace=60)
        assert down.returncode == 0, down.stderr
        assert server.proc.returncode == 0, fleet.log()
        assert not (tmp / "home" / "fleet.json").exists()  # the record goes with the fleet
        assert_nothing_left(ray_tmp)

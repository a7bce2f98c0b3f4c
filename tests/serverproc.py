"""Start a real `llamay serve` process on 127.0.0.1 for tests, and stop it afterwards."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

__all__ = ["ServerProc", "start_server", "free_port"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ServerProc:
    proc: subprocess.Popen[bytes]
    base: str
    log_path: Path

    @property
    def url(self) -> str:
        return self.base + "/v1"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None


@contextmanager
def start_server(
    model: str | Path, *args: str, home: Path, env: dict[str, str] | None = None, timeout: float = 120.0
) -> Iterator[ServerProc]:
    """Run `python -m llamay serve -m MODEL -addr 127.0.0.1:PORT ARGS...` until /health answers."""
    port = free_port()
    home.mkdir(parents=True, exist_ok=True)
    log_path = home / f"server-{port}.log"
    full_env = {**os.environ, "LLAMAY_HOME": str(home), **(env or {})}
    cmd = [sys.executable, "-m", "llamay", "serve", "-m", str(model), "-addr", f"127.0.0.1:{port}", *args]
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=full_env)
    server = ServerProc(proc, f"http://127.0.0.1:{port}", log_path)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}:\n{server.log()}")
            try:
                if httpx.get(server.base + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"server did not start in {timeout}s:\n{server.log()}")
            time.sleep(0.1)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

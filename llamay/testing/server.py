"""Server processes on 127.0.0.1 for tests and benchmarks: start one with its output in a log
file, wait until it answers, stop it (SIGTERM, then SIGKILL after a grace period). Every error
carries the tail of the log, which is where a server says why it did not start.

    with start_server("llamay", llamay_serve_argv(model, port), port, "/health") as server:
        httpx.get(server.url + "/models")   # leaving the block stops it
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

__all__ = [
    "HOST",
    "Server",
    "ServerError",
    "free_port",
    "llamay_serve_argv",
    "log_tail",
    "spawn",
    "start_server",
    "stop_server",
    "wait_ready",
]

HOST = "127.0.0.1"


class ServerError(RuntimeError):
    """A server process that did not start, or died; the message carries its log tail."""


@dataclass
class Server:
    """A started process listening on HOST:`port`, its output in `log_path`; a context
    manager that stops it on exit."""

    name: str
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def base(self) -> str:
        return self.base_url

    @property
    def url(self) -> str:
        """The OpenAI-style API root, `base_url` + "/v1"."""
        return self.base_url + "/v1"

    def log(self) -> str:
        """All the process has written so far."""
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc_info: object) -> None:
        stop_server(self)


def free_port() -> int:
    """A TCP port on HOST that is free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def llamay_serve_argv(model: str | Path, port: int, *extra: str) -> list[str]:
    """`llamay serve` on `model`, listening on HOST:port, run by this interpreter (so by the
    checkout and the environment the caller runs from)."""
    return [sys.executable, "-m", "llamay", "serve", "-m", str(model), "-addr", f"{HOST}:{port}", *extra]


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def spawn(
    name: str,
    argv: Sequence[str],
    port: int,
    *,
    env: Mapping[str, str | None] | None = None,
    log_path: Path | None = None,
) -> Server:
    """Start `argv` (which is to listen on HOST:port) without waiting for it, its output in
    `log_path` (default: a new temporary file). `env` overrides this process's environment;
    a None value removes that variable."""
    if log_path is None:
        fd, name_ = tempfile.mkstemp(prefix=f"{name}-", suffix=".log")
        os.close(fd)
        log_path = Path(name_)
    full_env = {k: v for k, v in {**os.environ, **(env or {})}.items() if v is not None}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            list(argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=full_env
        )
    return Server(name, proc, port, log_path)


def wait_ready(server: Server, ready_path: str, timeout: float) -> None:
    """Return once GET `ready_path` answers 200. Raises ServerError if the process exits
    first or is not ready within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    url = server.base_url + ready_path
    while True:
        code = server.proc.poll()
        if code is not None:
            raise ServerError(
                f"{server.name} exited with {code} before ready:\n{log_tail(server.log_path, 60)}"
            )
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise ServerError(
                f"{server.name} not ready after {timeout:.0f}s:\n{log_tail(server.log_path, 60)}"
            )
        time.sleep(0.1)


def start_server(
    name: str,
    argv: Sequence[str],
    port: int,
    ready_path: str = "/health",
    *,
    env: Mapping[str, str | None] | None = None,
    timeout: float = 120.0,
    log_path: Path | None = None,
) -> Server:
    """`spawn`, then `wait_ready`; a server that does not get ready is stopped before the
    ServerError is raised. Used in a `with`, the server is stopped when the block ends."""
    server = spawn(name, argv, port, env=env, log_path=log_path)
    try:
        wait_ready(server, ready_path, timeout)
    except BaseException:
        stop_server(server)
        raise
    return server


def stop_server(server: Server, grace: float = 20.0) -> int | None:
    """SIGTERM, then SIGKILL after `grace` seconds; returns the exit code."""
    if server.proc.poll() is None:
        server.proc.terminate()
        try:
            server.proc.wait(grace)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait(10)
    return server.proc.returncode

"""Shared helpers for benchmarks: server subprocesses on 127.0.0.1, server-sent events lines,
percentiles, machine load, JSON output."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx

__all__ = [
    "HOST",
    "Server",
    "ServerError",
    "free_port",
    "llamay_serve_argv",
    "log_tail",
    "machine_info",
    "percentile",
    "print_json",
    "running_server",
    "sse_data",
    "start_server",
    "stop_server",
]

HOST = "127.0.0.1"


class ServerError(RuntimeError):
    """A server process that did not start, or died; the message carries its log tail."""


@dataclass
class Server:
    name: str
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def llamay_serve_argv(model: str | Path, port: int, *extra: str) -> list[str]:
    """`llamay serve` on `model`, listening on HOST:port, run by this interpreter (so by the
    checkout and the environment the benchmark runs from)."""
    return [sys.executable, "-m", "llamay", "serve", "-m", str(model), "-addr", f"{HOST}:{port}", *extra]


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def start_server(
    name: str,
    argv: Sequence[str],
    port: int,
    ready_path: str,
    *,
    env: Mapping[str, str | None] | None = None,
    timeout: float = 120.0,
) -> Server:
    """Start `argv` (which must listen on HOST:port) with its output in a log file, and wait
    until GET ready_path answers 200. Raises ServerError (after stopping it) if it exits first
    or is not ready within `timeout` seconds. `env` overrides this process's environment; a
    None value removes that variable."""
    fd, log_name = tempfile.mkstemp(prefix=f"bench-{name}-", suffix=".log")
    full_env = {k: v for k, v in {**os.environ, **(env or {})}.items() if v is not None}
    with os.fdopen(fd, "wb") as log:
        proc = subprocess.Popen(
            list(argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=full_env
        )
    server = Server(name, proc, port, Path(log_name))
    try:
        _wait_ready(server, ready_path, timeout)
    except BaseException:
        stop_server(server)
        raise
    return server


def _wait_ready(server: Server, ready_path: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    url = server.base_url + ready_path
    while time.monotonic() < deadline:
        code = server.proc.poll()
        if code is not None:
            raise ServerError(f"{server.name} exited with {code} before ready:\n{log_tail(server.log_path)}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        time.sleep(0.2)
    raise ServerError(f"{server.name} not ready after {timeout:.0f}s:\n{log_tail(server.log_path)}")


def stop_server(server: Server, grace: float = 15.0) -> int | None:
    """SIGTERM, then SIGKILL after `grace` seconds; returns the exit code."""
    if server.proc.poll() is None:
        server.proc.terminate()
        try:
            server.proc.wait(grace)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait(10)
    return server.proc.returncode


@contextlib.contextmanager
def running_server(
    name: str,
    argv: Sequence[str],
    port: int,
    ready_path: str,
    *,
    env: Mapping[str, str | None] | None = None,
    timeout: float = 120.0,
) -> Iterator[Server]:
    """start_server ... stop_server, always stopping it."""
    server = start_server(name, argv, port, ready_path, env=env, timeout=timeout)
    try:
        yield server
    finally:
        stop_server(server)


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0..100) with linear interpolation between closest ranks; NaN if empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100.0
    lo = math.floor(rank)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


def sse_data(line: str) -> str | None:
    """The payload of a server-sent events `data:` line, stripped; None for any other line."""
    return line[5:].strip() if line.startswith("data:") else None


def machine_info(load_start: tuple[float, float, float], busy_warning: str) -> dict[str, Any]:
    """CPU count and load averages (os.getloadavg() taken at the start, and now), with
    `busy_warning` under "warning" when other processes kept over half the CPUs busy at the start."""
    cpus = os.cpu_count() or 1
    info: dict[str, Any] = {"cpus": cpus, "loadavg_start": load_start, "loadavg_end": os.getloadavg()}
    if load_start[0] > 0.5 * cpus:
        info["warning"] = busy_warning
    return info


def _finite(obj: Any) -> Any:
    """Replace NaN/inf (not valid JSON) with None, recursively."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


def print_json(obj: Any) -> None:
    """Print `obj` to stdout as one indented, strictly valid JSON object."""
    json.dump(_finite(obj), sys.stdout, indent=2, allow_nan=False)
    sys.stdout.write("\n")
    sys.stdout.flush()


T = TypeVar("T")


async def all_or_first_failure(coros: list[Coroutine[Any, Any, T]], failure: type[Exception]) -> list[T]:
    """Run `coros` concurrently; on the first `failure` (a benchmark's failed-request error)
    cancel the rest, closing their streams, and raise it. Any other error is raised as the
    task group raised it."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(c) for c in coros]
    except ExceptionGroup as eg:
        failures = [e for e in eg.exceptions if isinstance(e, failure)]
        if failures:
            raise failures[0] from None
        raise
    return [t.result() for t in tasks]


def sentences(words: list[str]) -> str:
    """Words as sentences of 12: capitalized, with full stops."""
    parts = []
    for i in range(0, len(words), 12):
        chunk = words[i : i + 12]
        parts.append(" ".join([chunk[0].capitalize(), *chunk[1:]]) + ".")
    return " ".join(parts)

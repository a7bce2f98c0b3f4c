"""A real `llamay serve` process on 127.0.0.1 for tests, its home and log in a test's folder,
stopped afterwards. The launcher itself is `llamay.testing.server`, which the benchmarks
share."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from llamay.testing import server as launcher
from llamay.testing.server import Server, free_port, llamay_serve_argv

__all__ = ["ServerProc", "start_server", "free_port"]

ServerProc = Server


@contextmanager
def start_server(
    model: str | Path, *args: str, home: Path, env: dict[str, str] | None = None, timeout: float = 120.0
) -> Iterator[ServerProc]:
    """Run `python -m llamay serve -m MODEL -addr 127.0.0.1:PORT ARGS...` with LLAMAY_HOME=`home`
    until /health answers; RuntimeError (the log's tail) if it exits or times out first. The
    process starts when the `with` block is entered."""
    port = free_port()
    home.mkdir(parents=True, exist_ok=True)
    with launcher.start_server(
        "llamay serve",
        llamay_serve_argv(model, port, *args),
        port,
        env={"LLAMAY_HOME": str(home), **(env or {})},
        timeout=timeout,
        log_path=home / f"server-{port}.log",
    ) as server:
        yield server

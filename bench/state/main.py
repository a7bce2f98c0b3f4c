"""State benchmark: what llamay's prefix cache and server-held contexts buy, each against a
baseline measured in the same run.

    .venv/bin/python -m bench.state [--model PATH_OR_NAME] [--quick]

1. prefix_cache_ttft: time to first token (streaming) of a chat request whose ~2,000-token
   system prompt an earlier request already sent, against the first (cold) request with that
   system prompt, whose system prompt nobody sent before. Target: hit/cold <= 0.05.
2. fork: a ~4,000-token context forked 1,000 ways, as one POST fork?n=1000 and as 1,000
   POST fork?n=1: wall time (target < 1 s) and growth of the server's VmRSS (target < 20 MB).
3. snapshot_restore: POST /v1/contexts/restore of a ~4,000-token context's snapshot against
   computing that context (POST /v1/contexts with a prompt the server never saw). Target:
   restore at least 10x faster. The snapshot download is timed separately. Each snapshot is
   restored into the server that made it (after measurement 1, its KV cache holds cached
   prefixes) and into a second server that has served only a warm-up request.
4. ticket_recipe: one instruction context, then short tickets classified by 8 concurrent
   clients, each ticket on its own fork (fork, chat with llamay_session, delete), against
   resending the instruction with the prefix cache defeated, and against plain resending on a
   warm server (the prefix cache working without sessions). Each way runs on a fresh server.
5. tenant_namespaces (bench/state/tenants.py): what isolating tenants in the prefix cache
   costs one caller (nothing, by design) and several callers sharing a system prompt,
   without and with an admin-shared context holding it.

Every server is `llamay serve` on 127.0.0.1 with a free port and its own LLAMAY_HOME (a
temporary folder, so saved contexts never leak between servers or into the user's home).
Prompts are deterministic random word sentences, fitted to a token count with the model's own
tokenizer. Prints one JSON object; a measurement that fails reports the request, the response
and the server log tail under "error" instead of numbers.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from llamay.testing.server import ServerError

from ..common import print_json
from .common import (
    FULL,
    QUICK,
    REQUEST_TIMEOUT,
    TARGETS,
    Sizes,
    Tokenizer,
    guarded,
    llamay_server,
    resolve_model,
    warm_up,
)
from .contexts import Target, measure_fork, measure_snapshot
from .prefix import measure_ttft
from .tenants import measure_namespaces
from .tickets import measure_tickets

# ---------------------------------------------------------------------------------------------
# The run: measurements 1-3 share one server, 4 and 5 start their own.


def llamay_commit() -> str:
    """The commit llamay runs from, "+dirty" when the work tree has changes."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30)
        dirty = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def measure_main_server(model: Path, tok: Tokenizer, sizes: Sizes, logs: dict[str, str]) -> dict[str, Any]:
    """Measurements 1-3 on one server (each with prompts it never saw); forks last, since
    they leave 2,000 records behind."""
    out: dict[str, Any] = {}
    with (
        llamay_server("contexts", model, sizes, logs) as server,
        httpx.Client(base_url=server.base_url, timeout=REQUEST_TIMEOUT) as client,
    ):
        warm_up(client)
        out["prefix_cache_ttft"] = guarded(
            "prefix_cache_ttft", server, lambda: measure_ttft(client, tok, sizes)
        )
        source = Target("same_server", server, client)
        out["snapshot_restore"] = guarded(
            "snapshot_restore", server, lambda: measure_snapshot(source, model, tok, sizes, logs)
        )
        out["fork"] = guarded("fork", server, lambda: measure_fork(client, server, tok, sizes))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.state", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model name or .gguf path (default: the default model)")
    parser.add_argument("--quick", action="store_true", help="shrink everything for a smoke run")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    started = time.perf_counter()
    load_start = os.getloadavg()
    model = resolve_model(args.model)
    logs: dict[str, str] = {}
    tok = Tokenizer(model)
    try:
        results = guarded_main(model, tok, sizes, logs)
    finally:
        tok.close()
    report = {
        "benchmark": "bench.state",
        "quick": args.quick,
        "model": str(model),
        "llamay_commit": llamay_commit(),
        "cpus": os.cpu_count(),
        "load_avg_start": list(load_start),
        "load_avg_end": list(os.getloadavg()),
        "sizes": sizes.__dict__,
        **results,
        "targets": TARGETS,
        "wall_s": time.perf_counter() - started,
        "server_logs": logs,
    }
    print_json(report)
    return 0


def guarded_main(model: Path, tok: Tokenizer, sizes: Sizes, logs: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    try:
        out.update(measure_main_server(model, tok, sizes, logs))
    except ServerError as exc:
        out["contexts_server_error"] = str(exc)
    out["ticket_recipe"] = guarded("ticket_recipe", None, lambda: measure_tickets(model, tok, sizes, logs))
    out["tenant_namespaces"] = guarded(
        "tenant_namespaces", None, lambda: measure_namespaces(model, tok, sizes, logs)
    )
    return out


if __name__ == "__main__":
    sys.exit(main())

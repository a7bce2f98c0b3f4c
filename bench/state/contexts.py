"""Measurements 2 and 3 of bench.state, on server-held contexts.

fork: a ~4,000-token context forked 1,000 ways, as one POST fork?n=1000 and as 1,000 POST
fork?n=1: wall time (target < 1 s) and growth of the server's VmRSS (target < 20 MB).

snapshot_restore: POST /v1/contexts/restore of a ~4,000-token context's snapshot against computing
that context (POST /v1/contexts with a prompt the server never saw). Target: restore at least 10x
faster. The snapshot download is timed separately. Each snapshot is restored into the server that
made it (after measurement 1, its KV cache holds cached prefixes) and into a second server that
has served only a warm-up request.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from llamay.testing.server import Server, log_tail

from ..common import percentile
from .common import (
    REQUEST_TIMEOUT,
    TARGETS,
    RequestFailed,
    Sizes,
    Tokenizer,
    cached_of,
    call,
    fitted_text,
    llamay_server,
    median,
    warm_up,
)

# ---------------------------------------------------------------------------------------------
# 2. Fork a context 1,000 ways: time and server RSS growth.


def create_context(client: httpx.Client, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
    t0 = time.perf_counter()
    info = call(client, "POST", "/v1/contexts", body=body).json()
    return info, time.perf_counter() - t0


def fork(client: httpx.Client, cid: str, n: int) -> list[str]:
    data = call(client, "POST", f"/v1/contexts/{cid}/fork", params={"n": n}).json()["data"]
    if len(data) != n:
        raise RuntimeError(f"fork?n={n} returned {len(data)} contexts")
    return [str(d["id"]) for d in data]


def session_check(client: httpx.Client, cid: str, prompt: str) -> dict[str, Any]:
    """Continue context `cid` (which holds `prompt`) by a few words; its usage shows how much
    of the prompt came from the context."""
    body = {"prompt": prompt + " And then", "max_tokens": 1, "temperature": 0, "llamay_session": cid}
    usage = call(client, "POST", "/v1/completions", body=body).json()["usage"]
    return {"prompt_tokens": usage["prompt_tokens"], "cached_tokens": cached_of(usage)}


def rss_mb(server: Server) -> float:
    """VmRSS of the server process, in MiB."""
    for line in Path(f"/proc/{server.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    raise RuntimeError("no VmRSS line in /proc/<pid>/status")


def measure_fork(client: httpx.Client, server: Server, tok: Tokenizer, sizes: Sizes) -> dict[str, Any]:
    prompt = fitted_text(tok, 2000, sizes.fork_context_tokens)
    info, create_s = create_context(client, {"prompt": prompt})
    cid = info["id"]
    call(client, "DELETE", f"/v1/contexts/{fork(client, cid, 1)[0]}")  # warm the routes up
    n = sizes.forks
    rss0 = rss_mb(server)
    t0 = time.perf_counter()
    batch = fork(client, cid, n)
    batch_s = time.perf_counter() - t0
    rss1 = rss_mb(server)
    latencies = []
    t1 = time.perf_counter()
    for _ in range(n):
        t = time.perf_counter()
        fork(client, cid, 1)
        latencies.append(time.perf_counter() - t)
    singles_s = time.perf_counter() - t1
    rss2 = rss_mb(server)
    return {
        "context_tokens": info["tokens"],
        "context_create_s": create_s,
        "n": n,
        "batch": _fork_result(batch_s, rss1 - rss0, n),
        "singles": _fork_result(singles_s, rss2 - rss1, n)
        | {
            "call_p50_ms": percentile(latencies, 50) * 1000,
            "call_p99_ms": percentile(latencies, 99) * 1000,
            "calls": "sequential, one keep-alive connection",
        },
        "rss_mb": {"before": rss0, "after_batch": rss1, "after_singles": rss2},
        "fork_in_use": session_check(client, batch[-1], prompt),
        "targets": {
            "seconds_max": TARGETS["fork_1000_seconds_max"] * n / 1000,
            "rss_growth_mb_max": TARGETS["fork_1000_rss_growth_mb_max"] * n / 1000,
        },
    }


def _fork_result(seconds: float, growth_mb: float, n: int) -> dict[str, Any]:
    return {
        "seconds": seconds,
        "rss_growth_mb": growth_mb,
        "rss_bytes_per_fork": growth_mb * 1024 * 1024 / n,
        "meets_time_target": seconds < TARGETS["fork_1000_seconds_max"] * n / 1000,
        "meets_rss_target": growth_mb < TARGETS["fork_1000_rss_growth_mb_max"] * n / 1000,
    }


# ---------------------------------------------------------------------------------------------
# 3. Snapshot + restore vs recompute.


@dataclass
class Target:
    """A server that snapshots are restored into."""

    name: str
    server: Server
    client: httpx.Client


def snapshot_rep(
    source: Target, targets: list[Target], tok: Tokenizer, sizes: Sizes, rep: int
) -> dict[str, Any]:
    """Compute a context from a prompt `source` never saw, download its snapshot, restore it
    into every target. A failed restore is recorded and the rep goes on."""
    prompt = fitted_text(tok, 3000 + rep, sizes.snapshot_tokens)
    info, recompute_s = create_context(source.client, {"prompt": prompt})
    cid = info["id"]
    t0 = time.perf_counter()
    snap = call(source.client, "GET", f"/v1/contexts/{cid}/snapshot").content
    download_s = time.perf_counter() - t0
    out: dict[str, Any] = {
        "tokens": info["tokens"],
        "recompute_s": recompute_s,
        "snapshot_download_s": download_s,
        "snapshot_bytes": len(snap),
    }
    for target in targets:
        out[f"restore_{target.name}"] = restore_into(target, snap, prompt)
    call(source.client, "DELETE", f"/v1/contexts/{cid}")
    return out


def restore_into(target: Target, snap: bytes, prompt: str) -> dict[str, Any]:
    """POST the snapshot to `target` (timed), prove the context usable, delete it."""
    t0 = time.perf_counter()
    try:
        restored = call(target.client, "POST", "/v1/contexts/restore", content=snap).json()
    except RequestFailed as exc:
        tail = log_tail(target.server.log_path, 40).splitlines()
        return {"error": exc.detail, "server_log_errors": [line for line in tail if "level=ERROR" in line]}
    restore_s = time.perf_counter() - t0
    check = session_check(target.client, restored["id"], prompt)
    call(target.client, "DELETE", f"/v1/contexts/{restored['id']}")
    return {"restore_s": restore_s, "restored_tokens": restored["tokens"], "restored_in_use": check}


def restore_summary(
    reps: list[dict[str, Any]], name: str, recompute: float, download: float
) -> dict[str, Any]:
    done = [r[f"restore_{name}"] for r in reps if "restore_s" in r[f"restore_{name}"]]
    restore = median([d["restore_s"] for d in done])
    speedup = recompute / restore if done else None
    return {
        "restores_ok": len(done),
        "restores_failed": len(reps) - len(done),
        "restore_s_median": restore,
        "restore_speedup": speedup,
        "restore_plus_download_speedup": recompute / (restore + download) if done else None,
        "meets_target": speedup is not None and speedup >= TARGETS["restore_speedup_min"],
    }


def measure_snapshot(
    source: Target, model: Path, tok: Tokenizer, sizes: Sizes, logs: dict[str, str]
) -> dict[str, Any]:
    with (
        llamay_server("restore-target", model, sizes, logs) as server,
        httpx.Client(base_url=server.base_url, timeout=REQUEST_TIMEOUT) as client,
    ):
        warm_up(client)
        second = Target("second_server", server, client)
        reps = [snapshot_rep(source, [source, second], tok, sizes, rep) for rep in range(sizes.snapshot_reps)]
    recompute = median([r["recompute_s"] for r in reps])
    download = median([r["snapshot_download_s"] for r in reps])
    return {
        "method": "per rep: POST /v1/contexts with a prompt the server never saw (recompute), GET its "
        "snapshot (download), POST /v1/contexts/restore with those bytes into the same server "
        "(which has served the earlier measurements, so its KV cache holds cached prefixes) and into "
        "a second server that only served a warm-up request (restore), then a completion with "
        "llamay_session on each restored context to show it is usable",
        "reps": sizes.snapshot_reps,
        "context_tokens": reps[0]["tokens"],
        "snapshot_bytes": reps[0]["snapshot_bytes"],
        "snapshot_mb": reps[0]["snapshot_bytes"] / 1024 / 1024,
        "recompute_s_median": recompute,
        "snapshot_download_s_median": download,
        "same_server": restore_summary(reps, source.name, recompute, download),
        "second_server": restore_summary(reps, second.name, recompute, download),
        "target_speedup_min": TARGETS["restore_speedup_min"],
        "runs": reps,
    }

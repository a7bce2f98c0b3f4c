"""The servers under test and what is measured on each while it runs.

llamay with `-speculate off` (the baseline) and `-speculate on`; llama-server with its
prompt-lookup speculation (`--spec-type ngram-simple`: the last n tokens looked up in the
prompt and the output so far, the m tokens after the match drafted, as llamay's lookup does)
with the same n-gram length and draft limit, and llama-server without speculation for
reference. With a draft model, llamay and llama-server each load it beside the target.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from llamay.engine.speculate import SpecConfig
from llamay.testing.server import ServerError, free_port, llamay_serve_argv, log_tail, start_server

from ..common import all_or_first_failure
from ..serve import llama_server
from ..serve.load import RequestFailed
from .client import REQUEST_TIMEOUT, Reply, counters, stream
from .workloads import Workload

__all__ = ["Run", "Variant", "llamay_has_draft", "run_variant", "variants"]

NGRAM = SpecConfig().ngram_max  # llamay's longest lookup n-gram, given to llama-server too
WARMUP = {"prompt": "The weather today is", "max_tokens": 4, "temperature": 0.0}


@dataclass(frozen=True)
class Variant:
    """A server configuration: `kind` "llamay" or "llama_server", `extra` its arguments
    beyond the shared ones, `concurrent`: also measure concurrent streams on it."""

    name: str
    kind: str
    extra: tuple[str, ...]
    concurrent: bool = False


def llamay_has_draft() -> bool:
    """Whether this checkout's `llamay serve` takes a draft model (`-draft MODEL`)."""
    out = subprocess.run(
        [sys.executable, "-m", "llamay", "serve", "-h"], capture_output=True, text=True, check=False
    ).stdout
    return re.search(r"^\s*-draft[ ,=]", out, re.MULTILINE) is not None


def variants(
    draft_max: int, plain_llama_server: bool, draft: Path | None, llamay_draft: bool
) -> list[Variant]:
    """Baseline first, then llamay with speculation, then llama-server's; the draft-model
    pair only with `draft` (llamay's side only when it takes one)."""
    lookup: tuple[str, ...] = ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", str(NGRAM))
    lookup += ("--spec-ngram-simple-size-m", str(draft_max))
    out = [
        Variant("llamay_off", "llamay", ("-speculate", "off"), concurrent=True),
        Variant("llamay_on", "llamay", ("-speculate", "on", "-draft-max", str(draft_max)), concurrent=True),
        Variant("llama_server_spec", "llama_server", lookup),
    ]
    if plain_llama_server:
        out.append(Variant("llama_server", "llama_server", ()))
    if draft is not None:
        if llamay_draft:
            extra = ("-speculate", "on", "-draft-max", str(draft_max), "-draft", str(draft))
            out.append(Variant("llamay_on_draft", "llamay", extra))
        both = (
            "--spec-type",
            "ngram-simple,draft-simple",
            "-md",
            str(draft),
            "--spec-draft-n-max",
            str(draft_max),
        )
        out.append(Variant("llama_server_draft", "llama_server", lookup[2:] + both))
    return out


def _argv(v: Variant, model: Path, port: int, args: argparse.Namespace) -> list[str]:
    if v.kind == "llamay":
        shared = ["-concurrency", "16", "-ctx", str(args.ctx), "-threads", str(args.threads), "-batch", "512"]
        return llamay_serve_argv(model, port, *shared, *v.extra)
    exe = llama_server.binary()
    if exe is None:
        raise ServerError("llama-server is not built: python -m bench.serve.llama_server")
    base = llama_server.server_argv(exe, model, port, threads=args.threads, n_ctx=args.ctx, parallel=1)
    return [*base, *v.extra]


@dataclass
class Run:
    """One variant's run: `result` goes into the JSON; `texts` (workload -> each rep's
    output) and `concurrent_texts` (stream i's output) are compared across variants."""

    result: dict[str, Any]
    texts: dict[str, list[str]]
    concurrent_texts: list[str]


def run_variant(v: Variant, model: Path, loads: Sequence[Workload], args: argparse.Namespace) -> Run:
    """Start `v` on `model`, measure, stop it; a failure becomes an "error" entry beside
    what was measured before it."""
    port = free_port()
    argv = _argv(v, model, port, args)
    run = Run({"command": argv[1:], "started": time.strftime("%H:%M:%S")}, {}, [])
    _say(f"{v.name}: starting")
    # Its own LLAMAY_HOME: a model's context store belongs to one process, and another llamay
    # may be serving the same model on this machine.
    home = tempfile.TemporaryDirectory(prefix="bench-speculative-home-")
    env = {"OMP_WAIT_POLICY": None, "LLAMAY_HOME": home.name}
    try:
        with start_server(v.name, argv, port, "/health", env=env, timeout=300) as server:
            run.result["log"] = str(server.log_path)
            try:
                asyncio.run(_measure(v, server.base_url, loads, args, run))
            except (RequestFailed, httpx.HTTPError) as exc:
                detail = exc.detail if isinstance(exc, RequestFailed) else {"what": repr(exc)}
                run.result["error"] = {**detail, "server_log_tail": log_tail(server.log_path, 40)}
    except ServerError as exc:
        run.result["error"] = {"what": "server did not start", "detail": str(exc)[-3000:]}
    finally:
        home.cleanup()
    if "error" in run.result:
        _say(f"{v.name}: FAILED: {str(run.result['error'])[:1500]}")
    return run


async def _measure(
    v: Variant, base_url: str, loads: Sequence[Workload], args: argparse.Namespace, run: Run
) -> None:
    llamay = v.kind == "llamay"
    limits = httpx.Limits(max_connections=32, max_keepalive_connections=32)
    async with httpx.AsyncClient(base_url=base_url, timeout=REQUEST_TIMEOUT, limits=limits) as client:
        (await client.post("/v1/completions", json=WARMUP)).raise_for_status()
        single: dict[str, list[dict[str, Any]]] = {}
        for rep in range(args.reps):
            for w in loads:
                before = await counters(client) if llamay else None
                reply = await stream(client, w)
                got = reply.summary()
                if before is not None:
                    got["stats"] = (await counters(client)).minus(before)
                single.setdefault(w.name, []).append(got)
                run.texts.setdefault(w.name, []).append(reply.text)
                _say(f"{v.name}: {w.name} rep {rep + 1}: {_brief(got)}")
        run.result["single"] = single
        if v.concurrent and args.streams > 0:
            run.result["concurrent"] = await _concurrent(client, loads, args.streams, llamay, run)
            _say(f"{v.name}: {args.streams} streams: {_brief(run.result['concurrent'])}")


async def _concurrent(
    client: httpx.AsyncClient, loads: Sequence[Workload], n: int, llamay: bool, run: Run
) -> dict[str, Any]:
    """`n` streams at once, the workloads in turn (each prompt already cached by the single
    streams): aggregate tokens over the wall time from sending to the last token."""
    picked = [loads[i % len(loads)] for i in range(n)]
    before = await counters(client) if llamay else None
    replies: list[Reply] = await all_or_first_failure([stream(client, w) for w in picked], RequestFailed)
    tokens = sum(r.completion_tokens for r in replies)
    wall = max(r.last for r in replies) - min(r.sent for r in replies)
    out: dict[str, Any] = {
        "streams": n,
        "workloads": [w.name for w in picked],
        "completion_tokens": tokens,
        "wall_s": round(wall, 4),
        "aggregate_tok_s": tokens / wall if wall > 0 else None,
        "per_stream_tok_s": [r.tok_s for r in replies],
    }
    if before is not None:
        out["stats"] = (await counters(client)).minus(before)
    run.concurrent_texts = [r.text for r in replies]
    return out


def _brief(got: dict[str, Any]) -> str:
    keys = ("completion_tokens", "tok_s", "aggregate_tok_s", "stats")
    return ", ".join(f"{k}={got[k]}" for k in keys if k in got)


def _say(text: str) -> None:
    print(f"bench.speculative {time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)

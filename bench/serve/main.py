"""Serving benchmark: llamay against llama.cpp's own `llama-server`, same model and workload.

    .venv/bin/python -m bench.serve [--model PATH_OR_NAME] [--quick] [--baseline] [--omp-passive]

Runs, one after the other, `llamay serve` and `llama-server` (built once by bench.serve.llama_server
from the llama.cpp in the llama-cpp-python source the engine uses; the first run builds it,
~6 minutes), each on 127.0.0.1 with a free port, and drives each through /v1/completions with
streaming: single-stream decode, prefill, time to first token (p50/p95), decode-heavy
concurrency 1/4/8/16 (100-token prompts), batched decode, the prompt-heavy workload (distinct
500- and 2,000-token prompts, 8 tokens out, 1 and 8 clients) and the time to first token of a
short prompt right after a long one. Prints one JSON object with every figure and the ratios
against the targets. `--baseline` adds llama-cpp-python's own server as a second baseline
(needs `pip install fastapi sse-starlette pydantic-settings starlette-context`);
`--omp-passive` adds llamay with OMP_WAIT_POLICY=passive.

Every request is greedy (temperature 0) with the model's end-of-generation tokens banned
through logit_bias, so each one generates exactly max_tokens. Prompts are random word
sequences, distinct for every request, so no server gets prefix reuse; every server gets the
same prompts in the same order.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib.util
import json
import math
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from llamay.testing.server import HOST, ServerError, free_port, log_tail, start_server

from ..common import machine_info, print_json, stop_on_sigterm
from . import llama_server
from .load import REQUEST_TIMEOUT, Prompts, RequestFailed, Vocab
from .phases import FULL, QUICK, Sizes, Workload, phases

BASELINE_EXTRAS = ("fastapi", "sse_starlette", "pydantic_settings", "starlette_context")
BASELINE_PIP = "fastapi sse-starlette pydantic-settings starlette-context"
# Settings the baseline needs to run the same computation as llamay, with the reason for each.
BASELINE_PARITY = [
    *("--interrupt_requests", "False"),  # default True cuts a stream short when another request arrives
    *("--logits_all", "False"),  # default True computes and copies logits for every prompt token
    *("--flash_attn", "True"),  # as llamay's context (flash attention on, llama.cpp's own kernels)
]
# llamay / llama-server, same run: at least these (TTFT: llama-server's / llamay's).
TARGETS = {
    "decode_ratio": 0.97,
    "prompt_heavy_c8_ratio": 1.2,
    "prompt_heavy_c8_over_c1": 1.0,  # llamay's own: 8 clients never slower than 1
    "aggregate_c8_ratio": 1.0,
    "prompt_heavy_ttft_p95_ratio": 1.0,
}


def _progress(name: str, phase: str) -> None:
    stamp = time.strftime("%H:%M:%S")
    print(f"bench.serve {stamp} {name}: {phase}", file=sys.stderr, flush=True)


async def run_workload(
    name: str,
    base_url: str,
    sizes: Sizes,
    prompts: Prompts,
    banned: list[int],
    out: dict[str, Any],
    only: frozenset[str] = frozenset(),
) -> None:
    """Run every phase (or those in `only`, after the warm-up) against base_url, adding each
    result to `out` as soon as it is done."""
    prompts.reset()
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=base_url, timeout=REQUEST_TIMEOUT, limits=limits) as client:
        for phase, step in phases(Workload(client, sizes, prompts, banned)):
            if only and phase != "warmup" and phase not in only:
                continue
            _progress(name, phase)
            result = await step()
            if phase != "warmup":
                out[phase] = result
                _progress(name, f"{phase} = {json.dumps(result)}")


# ---------------------------------------------------------------------------------------------
# Servers.


@dataclass(frozen=True)
class ServerSpec:
    name: str
    argv: list[str]
    ready_path: str
    env: Mapping[str, str | None]


def llamay_spec(
    name: str,
    model: Path,
    port: int,
    args: argparse.Namespace,
    env: Mapping[str, str | None],
    extra: list[str] | None = None,
) -> ServerSpec:
    argv = [sys.executable, "-m", "llamay", "serve", "-m", str(model), "-addr", f"{HOST}:{port}"]
    argv += ["-concurrency", "16", "-ctx", str(args.ctx), "-threads", str(args.threads)]
    argv += ["-batch", str(args.batch), *(extra or [])]
    return ServerSpec(name, argv, "/health", {"OMP_WAIT_POLICY": None, **env})


def parse_variant(text: str) -> tuple[str, dict[str, str | None], list[str]]:
    """ "NAME:K=V,K=V:ARGS" -> (name, environment, extra serve arguments)."""
    name, _, rest = text.partition(":")
    envs, _, extra = rest.partition(":")
    env: dict[str, str | None] = {}
    for item in filter(None, envs.split(",")):
        key, _, value = item.partition("=")
        env[key] = value
    return name, env, extra.split()


def llama_server_spec(exe: Path, model: Path, port: int, args: argparse.Namespace) -> ServerSpec:
    argv = llama_server.server_argv(
        exe, model, port, threads=args.threads, n_ctx=args.ctx, parallel=args.parallel
    )
    return ServerSpec("llama_server", argv, "/health", {"OMP_WAIT_POLICY": None})


def baseline_spec(model: Path, port: int, args: argparse.Namespace) -> ServerSpec:
    argv = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", HOST]
    argv += ["--port", str(port), "--n_ctx", str(args.ctx), "--n_threads", str(args.threads)]
    argv += ["--n_threads_batch", str(args.threads), "--n_batch", str(args.batch)]
    argv += BASELINE_PARITY
    return ServerSpec("llama_cpp_server", argv, "/v1/models", {"OMP_WAIT_POLICY": None})


def bench_server(
    spec: ServerSpec,
    port: int,
    sizes: Sizes,
    prompts: Prompts,
    banned: list[int],
    result: dict[str, Any],
    only: frozenset[str] = frozenset(),
) -> None:
    """Start the server, run the workload into `result`, stop it; a failure becomes an "error"
    entry beside the phases already done."""
    _progress(spec.name, "starting " + " ".join(spec.argv[1:]))
    result.update({"command": spec.argv[1:], "env": dict(spec.env)})
    try:
        with start_server(spec.name, spec.argv, port, spec.ready_path, env=spec.env) as server:
            result["log"] = str(server.log_path)
            try:
                asyncio.run(run_workload(spec.name, server.base_url, sizes, prompts, banned, result, only))
            except RequestFailed as exc:
                result["error"] = {**exc.detail, "server_log_tail": log_tail(server.log_path, 40)}
                if server.proc.poll() is not None:
                    result["error"]["server_exit_code"] = server.proc.returncode
    except ServerError as exc:
        result["error"] = {"what": "server did not start", "detail": str(exc)}
    if "error" in result:
        _progress(spec.name, f"FAILED: {json.dumps(result['error'])[:2000]}")


# ---------------------------------------------------------------------------------------------
# Comparison.


def _get(result: Mapping[str, Any], *keys: str | int) -> float:
    cur: Any = result
    for key in keys:
        if not isinstance(cur, Mapping) or key not in cur:
            return math.nan
        cur = cur[key]
    return float(cur)


def _ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(a) and not math.isnan(b) else math.nan


def _heavy(sizes: Sizes) -> str:
    """The prompt-heavy phase the targets judge: the longest prompts, 8 clients."""
    return f"prompt_heavy_{max(sizes.heavy_prompts)}_c8"


def targets(llamay: Mapping[str, Any], anchor: Mapping[str, Any], sizes: Sizes) -> dict[str, Any]:
    """llamay against the anchor (llama-server) in the same run; > 1 is llamay ahead."""
    heavy = _heavy(sizes)
    heavy_c1 = heavy.removesuffix("_c8") + "_c1"
    values = {
        "decode_ratio": _ratio(_get(llamay, "decode", "tok_s"), _get(anchor, "decode", "tok_s")),
        "prompt_heavy_c8_ratio": _ratio(_get(anchor, heavy, "wall_s"), _get(llamay, heavy, "wall_s")),
        "prompt_heavy_c8_over_c1": _ratio(_get(llamay, heavy_c1, "wall_s"), _get(llamay, heavy, "wall_s")),
        "aggregate_c8_ratio": _ratio(
            _get(llamay, "aggregate_c8", "tok_s"), _get(anchor, "aggregate_c8", "tok_s")
        ),
        "prompt_heavy_ttft_p95_ratio": _ratio(
            _get(anchor, heavy, "ttft_p95_ms"), _get(llamay, heavy, "ttft_p95_ms")
        ),
    }
    return {
        k: {"value": v, "target": TARGETS[k], "met": (v >= TARGETS[k]) if not math.isnan(v) else None}
        for k, v in values.items()
    }


def table(servers: Mapping[str, Mapping[str, Any]], sizes: Sizes) -> dict[str, Any]:
    """The headline figures side by side, each server's and llamay's ratio to llama-server
    (> 1: llamay ahead; for times, the anchor's time over llamay's)."""
    rows: dict[str, tuple[tuple[str, ...], bool]] = {
        "decode_tok_s": (("decode", "tok_s"), True),
        "prefill_tok_s": (("prefill", "tok_s"), True),
        "ttft_p50_ms": (("ttft", "p50_ms"), False),
        "ttft_p95_ms": (("ttft", "p95_ms"), False),
        **{f"aggregate_c{c}_tok_s": ((f"aggregate_c{c}", "tok_s"), True) for c in sizes.agg_levels},
        "decode_c8_tok_s": (("decode_c8", "tok_s"), True),
        **{
            f"prompt_heavy_{n}_c{c}_wall_s": ((f"prompt_heavy_{n}_c{c}", "wall_s"), False)
            for n in sizes.heavy_prompts
            for c in sizes.heavy_clients
        },
        "short_after_long_ttft_ms": (("after_long", "short_ttft_ms"), False),
    }
    out: dict[str, Any] = {}
    for row, (keys, higher_better) in rows.items():
        got = {name: _get(result, *keys) for name, result in servers.items()}
        mine, anchor = got.get("llamay", math.nan), got.get("llama_server", math.nan)
        ratio = _ratio(mine, anchor) if higher_better else _ratio(anchor, mine)
        out[row] = {**got, "llamay_vs_llama_server": ratio}
    return out


# ---------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.serve", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="model name or .gguf path (default: llamay's default)")
    p.add_argument("--quick", action="store_true", help="a small smoke run")
    p.add_argument("--threads", type=int, default=2, help="CPU threads for every server (default 2)")
    p.add_argument("--ctx", type=int, default=32768, help="KV cells for every server (default 32768)")
    p.add_argument("--parallel", type=int, default=8, help="llama-server's slots (-np; default 8)")
    p.add_argument("--batch", type=int, default=512, help="llamay's and the baseline's batch (default 512)")
    p.add_argument("--baseline", action="store_true", help="also run llama-cpp-python's server")
    p.add_argument("--omp-passive", action="store_true", help="also run llamay with OMP_WAIT_POLICY=passive")
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME:ENV=V,...:ARGS",
        help="also run llamay as NAME with these environment variables and extra serve arguments "
        '(e.g. "f32kv::-kv f32"); repeatable',
    )
    p.add_argument("--only", default="", help="comma-separated phases to run (default: all)")
    return p.parse_args(argv)


BUSY = (
    "other processes were using the CPUs (see loadavg): the numbers and ratios are distorted "
    "by contention and are not representative; rerun on an idle machine"
)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stop_on_sigterm()  # stop the servers and report, as on Ctrl-C
    if importlib.util.find_spec("llama_cpp") is None:
        print("bench.serve: llama-cpp-python is not installed (run ./setup.sh)", file=sys.stderr)
        return 2
    if args.baseline:
        missing = [m for m in BASELINE_EXTRAS if importlib.util.find_spec(m) is None]
        if missing:
            print(f"bench.serve: --baseline needs: .venv/bin/pip install {BASELINE_PIP}", file=sys.stderr)
            return 2
    from llamay.store import ModelStore

    model = ModelStore().resolve(args.model).path
    _progress("llama-server", "building (once)" if llama_server.binary() is None else "cached")
    exe = llama_server.build()
    sizes = QUICK if args.quick else FULL
    vocab = Vocab(model)
    try:
        banned = vocab.eog_ids()
        report = run_all(args, model, exe, sizes, Prompts(vocab), banned)
    finally:
        vocab.close()
    print_json(report)
    failed = report["interrupted"] or any("error" in s for s in report["servers"].values())
    return 1 if failed else 0


def run_all(
    args: argparse.Namespace, model: Path, exe: Path, sizes: Sizes, prompts: Prompts, banned: list[int]
) -> dict[str, Any]:
    load_start = os.getloadavg()
    servers: dict[str, Any] = {}
    specs: list[Callable[[int], ServerSpec]] = [
        lambda port: llamay_spec("llamay", model, port, args, {}),
        lambda port: llama_server_spec(exe, model, port, args),
    ]
    if args.omp_passive:
        omp: dict[str, str | None] = {"OMP_WAIT_POLICY": "passive"}
        specs.append(lambda port: llamay_spec("llamay_omp_passive", model, port, args, omp))
    for text in args.variant:
        name, env, extra = parse_variant(text)
        specs.append(functools.partial(llamay_spec, name, model, args=args, env=env, extra=extra))
    if args.baseline:
        specs.append(lambda port: baseline_spec(model, port, args))
    try:
        for make in specs:
            port = free_port()
            spec = make(port)
            only = frozenset(filter(None, args.only.split(",")))
            bench_server(spec, port, sizes, prompts, banned, servers.setdefault(spec.name, {}), only)
        interrupted = False
    except KeyboardInterrupt:
        interrupted = True
        print("bench.serve: interrupted; reporting what was measured", file=sys.stderr)
    llamay, anchor = servers.get("llamay", {}), servers.get("llama_server", {})
    return {
        "benchmark": "serve",
        "quick": args.quick,
        "interrupted": interrupted,
        "model": str(model),
        "machine": machine_info(load_start, BUSY),
        "settings": {
            "ctx": args.ctx,
            "threads": args.threads,
            "batch": args.batch,
            "parallel": args.parallel,
            "sizes": asdict(sizes),
        },  # fmt: skip
        "banned_eog_tokens": banned,
        "table": table(servers, sizes),
        "targets": targets(llamay, anchor, sizes),
        "servers": servers,
    }


if __name__ == "__main__":
    sys.exit(main())

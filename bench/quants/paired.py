"""Single-stream decode, llamay with speculation off against llama.cpp's own `llama-server`,
measured in pairs: both servers stay up, and one 128-token greedy decode on each follows the
other, the order swapped every pair, so each pair's ratio compares the two engines under the
same machine state. On a shared machine whose speed moves by a third between minutes, the
median of the pairs' ratios says which engine is faster per token where best-of-three runs
(bench.quants' main measurement) can be decided by one lucky minute.

    .venv/bin/python -m bench.quants.paired [--shapes 1b] [--quants Q4_0,...] [--pairs 10]

Uses bench.quants' models (written and quantised once, cached). Prints one JSON object: for
each model, every pair's tok/s and ratio, their median ratio and how many pairs llamay won.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

from llamay.testing.server import Server, ServerError, free_port, start_server

from ..common import machine_info, print_json, stop_on_sigterm
from ..serve import llama_server
from ..serve.load import REQUEST_TIMEOUT, Prompts, RequestFailed, Vocab, completion_body, stream_completion
from ..serve.main import ServerSpec, llama_server_spec, llamay_spec
from .main import BUSY, NOSPEC_ARGS, add_model_args, model_lists
from .models import ensure_models

PROMPT_TOKENS = 100
WARMUP_TOKENS = 8


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.quants.paired", description=__doc__.split("\n\n")[0])
    add_model_args(p)
    p.add_argument("--pairs", type=int, default=10, help="decodes on each server per model (default 10)")
    p.add_argument("--tokens", type=int, default=128, help="tokens per decode (default 128)")
    args = p.parse_args(argv)
    if args.pairs < 1 or args.tokens < 3:
        p.error("--pairs must be at least 1 and --tokens at least 3")
    model_lists(p, args)
    return args


def summarise(llamay: list[float], anchor: list[float]) -> dict[str, Any]:
    """Pairwise ratios (llamay over llama-server, > 1: llamay faster), their median, and how
    many pairs llamay won."""
    ratios = [a / b for a, b in zip(llamay, anchor, strict=True)]
    return {
        "llamay_tok_s": llamay,
        "llama_server_tok_s": anchor,
        "ratios": ratios,
        "median_ratio": statistics.median(ratios),
        "llamay_won": sum(r > 1.0 for r in ratios),
        "pairs": len(ratios),
    }


async def _rate(client: httpx.AsyncClient, prompt: str, tokens: int, banned: list[int]) -> float:
    """tok/s between the first and the last token of one streamed greedy completion."""
    s = await stream_completion(client, completion_body(prompt, tokens, banned))
    return (tokens - 1) / (s.last - s.first)


async def _pairs(
    urls: dict[str, str], args: argparse.Namespace, prompts: Prompts, banned: list[int]
) -> dict[str, Any]:
    got: dict[str, list[float]] = {name: [] for name in urls}
    clients = {name: httpx.AsyncClient(base_url=url, timeout=REQUEST_TIMEOUT) for name, url in urls.items()}
    try:
        warm, _ = prompts.make(PROMPT_TOKENS)
        for client in clients.values():
            await _rate(client, warm, WARMUP_TOKENS, banned)
        for i in range(args.pairs):
            prompt, _ = prompts.make(PROMPT_TOKENS)  # the same prompt for both sides of a pair
            order = list(urls) if i % 2 == 0 else list(urls)[::-1]
            for name in order:
                got[name].append(await _rate(clients[name], prompt, args.tokens, banned))
    finally:
        for client in clients.values():
            await client.aclose()
    return summarise(got["llamay"], got["llama_server"])


def _start(spec: ServerSpec, port: int) -> Server:
    return start_server(spec.name, spec.argv, port, spec.ready_path, env=spec.env)


def bench_model(args: argparse.Namespace, model: Path, exe: Path) -> dict[str, Any]:
    vocab = Vocab(model)
    try:
        banned, prompts = vocab.eog_ids(), Prompts(vocab)
        with ExitStack() as stack:
            # Each port is picked once the server before it holds its own, so the two differ.
            port = free_port()
            mine = stack.enter_context(
                _start(llamay_spec("llamay", model, port, args, {}, NOSPEC_ARGS), port)
            )
            port = free_port()
            anchor = stack.enter_context(_start(llama_server_spec(exe, model, port, args), port))
            urls = {"llamay": mine.base_url, "llama_server": anchor.base_url}
            result = asyncio.run(_pairs(urls, args, prompts, banned))
    finally:
        vocab.close()
    return {"file": str(model), **result}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stop_on_sigterm()
    load_start = os.getloadavg()
    exe = llama_server.build()
    report: dict[str, Any] = {
        "benchmark": "quants.paired",
        "settings": {k: getattr(args, k) for k in ("pairs", "tokens", "threads", "ctx", "parallel", "batch")},
        "models": {},
        "interrupted": False,
    }
    try:
        for shape in args.shape_list:
            for quant, path in ensure_models(shape, args.quant_list).items():
                print(f"bench.quants.paired: {shape} {quant}", file=sys.stderr, flush=True)
                try:
                    got = bench_model(args, path, exe)
                except (RequestFailed, ServerError) as exc:
                    got = {"file": str(path), "error": str(exc)}
                report["models"].setdefault(shape, {})[quant] = got
    except KeyboardInterrupt:
        report["interrupted"] = True
    report["machine"] = machine_info(load_start, BUSY)
    print_json(report)
    failed = any("error" in m for shape in report["models"].values() for m in shape.values())
    return 1 if report["interrupted"] or failed else 0


if __name__ == "__main__":
    sys.exit(main())

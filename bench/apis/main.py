"""API-route benchmark: one chat workload through the OpenAI, Anthropic and Ollama routes, and
model switch times.

    .venv/bin/python -m bench.apis [--quick] [--no-official]

One `llamay serve` on the default model, started with -max-loaded 1, serves both parts.

Part 1 runs the same workload through POST /v1/chat/completions, /v1/messages and /api/chat in
interleaved rounds (OpenAI, Anthropic, Ollama, OpenAI, ...), so machine noise falls on all three
alike: `concurrency` clients, each sending streamed, greedy chat requests of at most
`max_tokens` tokens back to back. All three routes are driven by raw httpx.AsyncClient code (one
client per route, the same limits), so client overhead is alike; then, unless --no-official, by
the official openai, anthropic and ollama clients. The OpenAI route bans the model's
end-of-generation tokens through logit_bias, so it always generates max_tokens; the Anthropic
and Ollama routes have no way to ban them, so the prompts ask for long essays and throughput
counts the completion tokens each response reports (usage.completion_tokens,
usage.output_tokens, eval_count): tokens/s, not requests/s. The OpenAI route also runs without
logit_bias, as the other two do, to tell the route's cost from the bias's. The target is each
route's aggregate tokens/s at least 0.95 of the OpenAI route's.

Part 2 times model switches between smollm2:135m and gemma3:270m (a request for the model that
is not loaded, until its first token: one unload plus one load), both ways, and each model's
load alone (POST /api/reset, then POST /api/load; and, after another reset, a cold request's
time to first token).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Coroutine
from dataclasses import asdict
from pathlib import Path
from typing import Any

from llamay.testing.server import Server, ServerError, free_port, llamay_serve_argv, log_tail, start_server

from ..common import machine_info, print_json
from .clients import CLIENT_NOTE, EOS_NOTE, Workload
from .common import FULL, QUICK, RequestFailed, Sizes, progress
from .routes import compare_routes
from .switch import SWITCH_MODELS, switch_times

# Under "machine" when the CPUs were busy before the run started.
BUSY_WARNING = (
    "other processes were using the CPUs (see loadavg): absolute speeds are distorted; the "
    "interleaved route ratios are meant to survive this, the switch and load times are not"
)

# ---------------------------------------------------------------------------------------------
# Servers, the model's end-of-generation tokens, and the run.


def eog_ids(path: Path) -> tuple[int, ...]:
    """Every token llama.cpp treats as end of generation in the GGUF at `path` (vocab only)."""
    import llama_cpp

    logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)
    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise RuntimeError(f"llama.cpp could not load the vocabulary of {path}")
    try:
        vocab = llama_cpp.llama_model_get_vocab(model)
        n = llama_cpp.llama_vocab_n_tokens(vocab)
        return tuple(t for t in range(n) if llama_cpp.llama_vocab_is_eog(vocab, t))
    finally:
        llama_cpp.llama_model_free(model)


async def guarded(server: Server, part: Coroutine[Any, Any, dict[str, Any]]) -> dict[str, Any]:
    """`part`'s result, or an "error" entry with the request, response and server log tail."""
    try:
        return await part
    except RequestFailed as exc:
        progress(f"FAILED: {exc}")
        error = {**exc.detail, "server_log_tail": log_tail(server.log_path, 40)}
        if server.proc.poll() is not None:
            error["server_exit_code"] = server.proc.returncode
        return {"error": error}


async def both_parts(server: Server, sizes: Sizes, w: Workload, official: bool) -> dict[str, Any]:
    routes = await guarded(server, compare_routes(server.base_url, sizes, w, official))
    switch = await guarded(server, switch_times(server.base_url, sizes))
    return {"routes": routes, "model_switch": switch}


def run_server(sizes: Sizes, w: Workload, official: bool) -> dict[str, Any]:
    """One server, -max-loaded 1, for both parts (part 1 uses only the default model)."""
    port = free_port()
    argv = llamay_serve_argv(w.model, port, "-concurrency", str(sizes.concurrency), "-max-loaded", "1")
    progress(f"starting {' '.join(argv[1:])}")
    try:
        with start_server("apis", argv, port, "/health", timeout=300.0) as server:
            out = asyncio.run(both_parts(server, sizes, w, official))
            return {"server": {"command": argv[1:], "log": str(server.log_path)}, **out}
    except ServerError as exc:
        error = {"error": {"what": "server did not start", "detail": str(exc)}}
        return {"server": {"command": argv[1:]}, "routes": error, "model_switch": error}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.apis", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a small smoke run (under 3 minutes)")
    p.add_argument("--no-official", action="store_true", help="skip the official-client rounds")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from llamay.store import ModelStore
    from llamay.store.catalog import DEFAULT_MODEL

    sizes = QUICK if args.quick else FULL
    store = ModelStore()
    paths = {m: store.resolve(m).path for m in {DEFAULT_MODEL, *SWITCH_MODELS}}  # fetched before timing
    w = Workload(DEFAULT_MODEL, sizes.max_tokens, eog_ids(paths[DEFAULT_MODEL]))
    load_start = os.getloadavg()
    out = run_server(sizes, w, official=not args.no_official)
    print_json(
        {
            "benchmark": "apis",
            "quick": args.quick,
            "model": DEFAULT_MODEL,
            "machine": machine_info(load_start, BUSY_WARNING),
            "client": CLIENT_NOTE,
            "settings": {**asdict(sizes), "temperature": 0.0, "stream": True},
            "end_of_generation": {**EOS_NOTE, "banned_ids": list(w.banned)},
            **out,
        }
    )
    return 1 if "error" in out["routes"] or "error" in out["model_switch"] else 0


if __name__ == "__main__":
    sys.exit(main())

"""The serving benchmark's measurements, each a coroutine over one running server: decode,
prefill, time to first token, decode-heavy concurrency, batched decode, the prompt-heavy
workload (distinct long prompts, short answers, 1 and 8 clients) and the fixed cost of a short
prompt that follows a long one."""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import httpx

from ..common import all_or_first_failure, percentile
from .load import Prompts, RequestFailed, Stream, completion_body, stream_completion

__all__ = ["Sizes", "FULL", "QUICK", "Workload", "phases"]


@dataclass(frozen=True)
class Sizes:
    """How much of each measurement to run."""

    prefill_prompt: int = 1000
    prefill_reps: int = 5
    decode_tokens: int = 128
    decode_reps: int = 3
    ttft_prompt: int = 100
    ttft_requests: int = 12
    ttft_max_tokens: int = 4
    agg_levels: tuple[int, ...] = (1, 4, 8, 16)
    agg_prompt: int = 100
    agg_reps: int = 3
    agg_max_tokens: int = 64
    heavy_prompts: tuple[int, ...] = (500, 2000)  # prompt-heavy: distinct prompts of these lengths
    heavy_requests: int = 16  # per length and client count
    heavy_clients: tuple[int, ...] = (1, 8)
    heavy_max_tokens: int = 8
    after_long: tuple[int, int] = (3100, 210)  # (long prompt, short prompt that follows it)
    after_long_reps: int = 2


FULL = Sizes()
QUICK = Sizes(
    prefill_reps=2,
    decode_tokens=64,
    decode_reps=1,
    ttft_requests=4,
    agg_reps=1,
    agg_max_tokens=16,
    heavy_prompts=(500,),
    heavy_requests=4,
    after_long=(1000, 100),
    after_long_reps=1,
)


@dataclass
class Workload:
    client: httpx.AsyncClient
    sizes: Sizes
    prompts: Prompts
    banned: list[int]

    async def run(self, prompt_tokens: int, max_tokens: int) -> tuple[Stream, int]:
        text, n = self.prompts.make(prompt_tokens)
        return await stream_completion(self.client, completion_body(text, max_tokens, self.banned)), n


async def warmup(w: Workload) -> None:
    await w.run(32, 8)
    await all_or_first_failure([w.run(32, 8) for _ in range(4)], RequestFailed)


async def measure_prefill(w: Workload) -> dict[str, Any]:
    """max_tokens 1: prompt tokens / time to the end of the response."""
    rates, counts = [], []
    for _ in range(w.sizes.prefill_reps):
        s, n = await w.run(w.sizes.prefill_prompt, 1)
        rates.append(n / (s.done - s.sent))
        counts.append(n)
    return {"tok_s": statistics.median(rates), "runs_tok_s": rates, "prompt_tokens": counts}


async def measure_decode(w: Workload) -> dict[str, Any]:
    """One request at a time: (n - 1) / (last token - first token)."""
    n = w.sizes.decode_tokens
    rates = []
    for _ in range(w.sizes.decode_reps):
        s, _ = await w.run(w.sizes.ttft_prompt, n)
        rates.append((n - 1) / (s.last - s.first))
    return {"tok_s": statistics.median(rates), "runs_tok_s": rates, "max_tokens": n}


async def measure_ttft(w: Workload) -> dict[str, Any]:
    ttfts = []
    for _ in range(w.sizes.ttft_requests):
        s, _ = await w.run(w.sizes.ttft_prompt, w.sizes.ttft_max_tokens)
        ttfts.append(s.ttft * 1000.0)
    return {
        "p50_ms": percentile(ttfts, 50),
        "p95_ms": percentile(ttfts, 95),
        "requests": len(ttfts),
        "prompt_tokens": w.sizes.ttft_prompt,
    }


async def measure_aggregate(w: Workload, concurrency: int) -> dict[str, Any]:
    """`concurrency` clients, each running agg_reps requests back to back."""
    m = w.sizes.agg_max_tokens

    async def client() -> list[Stream]:
        return [(await w.run(w.sizes.agg_prompt, m))[0] for _ in range(w.sizes.agg_reps)]

    start = time.perf_counter()
    per_client = await all_or_first_failure([client() for _ in range(concurrency)], RequestFailed)
    wall = time.perf_counter() - start
    streams = [s for got in per_client for s in got]
    return {
        "tok_s": len(streams) * m / wall,
        "requests": len(streams),
        "wall_s": wall,
        "ttft_p50_ms": percentile([s.ttft * 1000.0 for s in streams], 50),
    }


async def measure_decode_batch(w: Workload, concurrency: int) -> dict[str, Any]:
    """`concurrency` requests at once, each an 8-token prompt and decode_tokens of output:
    batched decoding with next to no prefill, the figure single-stream decode compares to.
    Repeated as often as single-stream decode; the median counts (one run is ~7 s, and a
    noisy machine moves a single run by 15%)."""
    m = w.sizes.decode_tokens
    rates, walls = [], []
    for _ in range(w.sizes.decode_reps):
        start = time.perf_counter()
        got = await all_or_first_failure([w.run(8, m) for _ in range(concurrency)], RequestFailed)
        walls.append(time.perf_counter() - start)
        rates.append(len(got) * m / walls[-1])
    return {
        "tok_s": statistics.median(rates),
        "runs_tok_s": rates,
        "requests": concurrency,
        "wall_s": statistics.median(walls),
        "prompt_tokens": 8,
    }


async def measure_prompt_heavy(w: Workload, prompt_tokens: int, clients: int) -> dict[str, Any]:
    """`heavy_requests` distinct prompts of `prompt_tokens`, short answers, shared among
    `clients` clients that each send their next request when the last one ends (a nightly job
    summarising documents in parallel): wall time, and prompt tokens per second."""
    queue = list(range(w.sizes.heavy_requests))
    got: list[tuple[Stream, int]] = []

    async def client() -> None:
        while queue:
            queue.pop()
            got.append(await w.run(prompt_tokens, w.sizes.heavy_max_tokens))

    start = time.perf_counter()
    await all_or_first_failure([client() for _ in range(clients)], RequestFailed)
    wall = time.perf_counter() - start
    return {
        "wall_s": wall,
        "prompt_tok_s": sum(n for _, n in got) / wall,
        "requests": len(got),
        "clients": clients,
        "prompt_tokens": prompt_tokens,
        "ttft_p50_ms": percentile([s.ttft * 1000.0 for s, _ in got], 50),
        "ttft_p95_ms": percentile([s.ttft * 1000.0 for s, _ in got], 95),
    }


async def measure_after_long(w: Workload) -> dict[str, Any]:
    """The time to first token of a fresh short prompt sent right after a long one finished:
    the fixed cost a request pays for what came before it."""
    long_n, short_n = w.sizes.after_long
    ttfts, long_ttfts = [], []
    for _ in range(w.sizes.after_long_reps):
        s, _ = await w.run(long_n, 2)
        long_ttfts.append(s.ttft * 1000.0)
        s, _ = await w.run(short_n, 2)
        ttfts.append(s.ttft * 1000.0)
    return {
        "short_ttft_ms": statistics.median(ttfts),
        "runs_short_ttft_ms": ttfts,
        "long_ttft_ms": statistics.median(long_ttfts),
        "prompts": [long_n, short_n],
    }


def phases(w: Workload) -> list[tuple[str, Callable[[], Awaitable[Any]]]]:
    """The measurements in run order: those the targets use first, so that a run cut short
    still yields them."""
    sz = w.sizes
    levels = sorted(sz.agg_levels, key=lambda c: (c != 8, c))
    steps: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        ("warmup", partial(warmup, w)),
        ("decode", partial(measure_decode, w)),
    ]
    steps += [(f"aggregate_c{c}", partial(measure_aggregate, w, c)) for c in levels[:1]]
    steps += [("decode_c8", partial(measure_decode_batch, w, 8))]
    steps += [
        (f"prompt_heavy_{n}_c{c}", partial(measure_prompt_heavy, w, n, c))
        for n in sz.heavy_prompts
        for c in sz.heavy_clients
    ]
    steps += [("prefill", partial(measure_prefill, w)), ("ttft", partial(measure_ttft, w))]
    steps += [("after_long", partial(measure_after_long, w))]
    steps += [(f"aggregate_c{c}", partial(measure_aggregate, w, c)) for c in levels[1:]]
    return steps

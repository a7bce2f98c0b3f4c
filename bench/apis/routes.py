"""Part 1 of bench.apis: one chat workload through the OpenAI, Anthropic and Ollama routes in
interleaved rounds (so machine noise falls on all of them alike), each route's tokens/s and time
to first token, and each route's tokens/s over the OpenAI route's (target: at least 0.95)."""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import httpx

from ..common import all_or_first_failure, percentile
from .clients import Official, Send, Workload, official_senders, raw_senders
from .common import LIMITS, NO_BIAS, REQUEST_TIMEOUT, ROUTES, Reply, RequestFailed, Sizes, progress

TARGET_RATIO = 0.95
TOPICS = (
    "the river trade of medieval Europe",
    "the invention of the printing press",
    "how lighthouses were built and kept",
    "the history of the postal service",
    "the first railways and the towns they changed",
    "how bread baking spread around the world",
    "the navigators who first crossed the Pacific",
    "the growth of public libraries",
    "the history of clock making",
    "how cities got clean water",
    "the story of the silk road",
    "the early days of photography",
)


# ---------------------------------------------------------------------------------------------
# Rounds: every client sends its prompts back to back; the routes take turns.


@dataclass
class Round:
    wall: float
    replies: list[Reply]

    @property
    def tokens(self) -> int:
        return sum(r.tokens for r in self.replies)


def prompt(tag: str, topic: int) -> str:
    """A prompt that makes a small model write on: a distinct tag first (no prefix-cache hit
    beyond the chat template's), then a topic that is the same for every route."""
    subject = TOPICS[topic % len(TOPICS)]
    return (
        f"Request {tag}. Write a long, detailed essay of at least 800 words about {subject}. "
        "Cover its history, the people involved, how it worked day to day, and its legacy."
    )


def round_prompts(route: str, rnd: int, sizes: Sizes) -> list[list[str]]:
    """`concurrency` lists of `requests_per_client` prompts for one route in round `rnd`."""
    per = sizes.requests_per_client
    return [
        [prompt(f"{route}-{rnd}-{c}-{i}", rnd + c * per + i) for i in range(per)]
        for c in range(sizes.concurrency)
    ]


async def run_round(send: Send, prompts: list[list[str]]) -> Round:
    async def client(mine: list[str]) -> list[Reply]:
        return [await send(p) for p in mine]

    start = time.perf_counter()
    per_client = await all_or_first_failure([client(mine) for mine in prompts], RequestFailed)
    return Round(time.perf_counter() - start, [r for got in per_client for r in got])


async def interleaved(
    senders: dict[str, Send], sizes: Sizes, rounds: int, label: str
) -> dict[str, list[Round]]:
    """`rounds` rounds of A B C: each route's rounds, in order."""
    out: dict[str, list[Round]] = {name: [] for name in senders}
    for rnd in range(rounds):
        for name, send in senders.items():
            got = await run_round(send, round_prompts(f"{label}-{name}", rnd, sizes))
            progress(f"{label} round {rnd + 1}/{rounds}: {name} {got.tokens / got.wall:.1f} tok/s")
            out[name].append(got)
    return out


async def warmup(senders: dict[str, Send], sizes: Sizes) -> dict[str, float]:
    """One request per route (then a concurrent burst, if `sizes` says so); returns each route's first
    request time to its last token (first-use costs show there, not in the rounds)."""
    first: dict[str, float] = {}
    for name, send in senders.items():
        progress(f"warmup: {name}")
        reply = await send(prompt(f"warm-{name}", 0))
        first[name] = reply.done - reply.sent
        if sizes.warmup_burst:
            await run_round(send, [[prompt(f"warm-{name}-{c}", c)] for c in range(sizes.concurrency)])
    return first


# ---------------------------------------------------------------------------------------------
# Summaries and ratios.


def summarize(rounds: list[Round], max_tokens: int) -> dict[str, Any]:
    replies = [r for rnd in rounds for r in rnd.replies]
    tokens = sum(rnd.tokens for rnd in rounds)
    wall = sum(rnd.wall for rnd in rounds)
    ttfts = [r.ttft * 1000.0 for r in replies]
    return {
        "tok_s": tokens / wall if wall else math.nan,
        "rounds_tok_s": [rnd.tokens / rnd.wall for rnd in rounds],
        "requests": len(replies),
        "completion_tokens": tokens,
        "tokens_per_request": tokens / len(replies) if replies else math.nan,
        "requests_at_max_tokens": sum(r.tokens == max_tokens for r in replies),
        "stop_reasons": dict(Counter(str(r.stop) for r in replies)),
        "wall_s": wall,
        "ttft_p50_ms": percentile(ttfts, 50),
        "ttft_p95_ms": percentile(ttfts, 95),
    }


def _ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(a) and not math.isnan(b) else math.nan


def ratios(results: dict[str, list[Round]], base: str, names: tuple[str, ...]) -> dict[str, Any]:
    """Each of `names`' tokens/s over the base route's: over all rounds, and the median of the
    per-round ratios (paired, since rounds interleave)."""
    out: dict[str, Any] = {}
    base_rounds = results[base]
    for name in names:
        rounds = results[name]
        agg = _ratio(sum(r.tokens for r in rounds), sum(r.wall for r in rounds))
        agg = _ratio(agg, _ratio(sum(r.tokens for r in base_rounds), sum(r.wall for r in base_rounds)))
        paired = [
            _ratio(r.tokens / r.wall, b.tokens / b.wall) for r, b in zip(rounds, base_rounds, strict=True)
        ]
        out[name] = {
            "aggregate": agg,
            "paired_median": statistics.median(paired) if paired else math.nan,
            "rounds": paired,
            "target": TARGET_RATIO,
            "met": None if math.isnan(agg) else agg >= TARGET_RATIO,
        }
    return out


def report(results: dict[str, list[Round]], max_tokens: int) -> dict[str, Any]:
    return {
        "routes": {name: summarize(rounds, max_tokens) for name, rounds in results.items()},
        "ratio_to_openai": ratios(results, "openai", (NO_BIAS, "anthropic", "ollama")),
        "ratio_to_openai_no_logit_bias": ratios(results, NO_BIAS, ("anthropic", "ollama")),
    }


# ---------------------------------------------------------------------------------------------
# The routes side by side: raw httpx rounds, then the official clients' rounds.


async def compare_routes(base_url: str, sizes: Sizes, w: Workload, official: bool) -> dict[str, Any]:
    async with contextlib.AsyncExitStack() as stack:
        clients = {
            name: await stack.enter_async_context(
                httpx.AsyncClient(base_url=base_url, timeout=REQUEST_TIMEOUT, limits=LIMITS)
            )
            for name in ROUTES
        }
        senders = raw_senders(clients, w)
        out: dict[str, Any] = {"first_request_s": await warmup(senders, sizes)}
        out.update(report(await interleaved(senders, sizes, sizes.rounds, "raw"), w.max_tokens))
    if official and sizes.official_rounds > 0:
        out["official_clients"] = await compare_official(base_url, sizes, w)
    return out


async def compare_official(base_url: str, sizes: Sizes, w: Workload) -> dict[str, Any]:
    o = Official.connect(base_url)
    try:
        senders = official_senders(o, w)
        await warmup(senders, sizes)
        results = await interleaved(senders, sizes, sizes.official_rounds, "official")
    finally:
        await o.close()
    return report(results, w.max_tokens)

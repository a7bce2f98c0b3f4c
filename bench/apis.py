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
import contextlib
import json
import logging
import math
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import httpx

from .common import HOST, Server, ServerError, free_port, log_tail, percentile, print_json, running_server

T = TypeVar("T")
# The OpenAI route twice: as the workload asks (EOS banned), and without logit_bias, as the
# other two routes run: the pair tells the route's cost from the cost of the bias itself.
NO_BIAS = "openai_no_logit_bias"
ROUTES = ("openai", NO_BIAS, "anthropic", "ollama")
SWITCH_MODELS = ("smollm2:135m", "gemma3:270m")
TARGET_RATIO = 0.95
BAN_BIAS = -100
REQUEST_TIMEOUT = httpx.Timeout(connect=10.0, read=300.0, write=30.0, pool=300.0)
REQUEST_DEADLINE_S = 600.0
LIMITS = httpx.Limits(max_connections=64, max_keepalive_connections=64)
SWITCH_MAX_TOKENS = 4
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
CLIENT_NOTE = (
    "raw: one httpx.AsyncClient per route (HTTP/1.1 keep-alive, the same limits), streaming, the "
    "stream parsed by hand; official: openai.AsyncOpenAI, anthropic.AsyncAnthropic, ollama.AsyncClient"
)
EOS_NOTE = {
    "openai": "end-of-generation tokens banned with logit_bias -100: every request runs to max_tokens",
    NO_BIAS: "the OpenAI route with no logit_bias, like the other two: a control for the bias's cost",
    "anthropic": "no way to ban EOS on /v1/messages: essay prompts that run long; tokens from "
    "message_delta usage.output_tokens",
    "ollama": "no logit_bias option on /api/chat: essay prompts that run long; tokens from the final "
    "object's eval_count",
}


@dataclass(frozen=True)
class Sizes:
    """How much of each measurement to run."""

    concurrency: int = 8
    max_tokens: int = 64
    rounds: int = 8
    requests_per_client: int = 1
    official_rounds: int = 3  # 0: no official-client rounds
    warmup_burst: bool = True  # a concurrent burst per route after its first request
    first_switch_apart: bool = True  # one switch each way before the timed ones, reported apart
    switch_reps: int = 3
    load_reps: int = 3


FULL = Sizes()
QUICK = Sizes(
    concurrency=4,
    max_tokens=8,
    rounds=1,
    official_rounds=0,
    warmup_burst=False,
    first_switch_apart=False,
    switch_reps=1,
    load_reps=1,
)


def _progress(phase: str) -> None:
    print(f"bench.apis {time.strftime('%H:%M:%S')} {phase}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# One streamed chat request, its timing and its failure.


class RequestFailed(RuntimeError):
    """A request that did not stream a whole reply; carries the request and the response."""

    def __init__(self, what: str, route: str, body: Any, status: int | None, response: str) -> None:
        super().__init__(f"{route} {what}: request {json.dumps(body)[:300]} -> {status} {response[:300]!r}")
        self.detail = {
            "what": what,
            "route": route,
            "request": body,
            "status": status,
            "response": response[:2000],
        }


@dataclass
class Reply:
    """Client-side times (time.perf_counter) of one streamed reply."""

    sent: float
    first: float  # the first event carrying generated text
    done: float
    tokens: int
    stop: str | None

    @property
    def ttft(self) -> float:
        return self.first - self.sent


@dataclass
class Tracker:
    """What a stream parser has seen so far."""

    sent: float = field(default_factory=time.perf_counter)
    first: float = 0.0
    tokens: int | None = None
    stop: str | None = None
    text_events: int = 0

    def text(self, piece: str | None) -> None:
        if piece:
            self.first = self.first or time.perf_counter()
            self.text_events += 1

    def reply(self, route: str, body: Any) -> Reply:
        if not self.first or self.tokens is None:
            raise RequestFailed(
                "no generated text or no token count", route, body, 200, f"{self.text_events} text events"
            )
        return Reply(self.sent, self.first, time.perf_counter(), self.tokens, self.stop)


async def with_deadline(route: str, body: Any, coro: Awaitable[T]) -> T:
    """`coro` as RequestFailed on transport errors or after REQUEST_DEADLINE_S."""
    try:
        return await asyncio.wait_for(coro, REQUEST_DEADLINE_S)
    except TimeoutError:
        raise RequestFailed("timeout", route, body, None, f"no reply in {REQUEST_DEADLINE_S:.0f}s") from None
    except httpx.HTTPError as exc:
        raise RequestFailed("transport", route, body, None, f"{type(exc).__name__}: {exc}") from exc


def _json(route: str, body: Any, data: str) -> dict[str, Any]:
    try:
        event = json.loads(data)
    except ValueError:
        raise RequestFailed("malformed event", route, body, 200, data) from None
    if not isinstance(event, dict) or "error" in event or event.get("type") == "error":
        raise RequestFailed("error in stream", route, body, 200, data)
    return event


@contextlib.asynccontextmanager
async def post_stream(
    client: httpx.AsyncClient, route: str, path: str, body: dict[str, Any]
) -> AsyncIterator[AsyncIterator[str]]:
    """POST `body` to `path` and yield the response's lines; RequestFailed unless 200."""
    async with client.stream("POST", path, json=body) as resp:
        if resp.status_code != 200:
            text = (await resp.aread()).decode(errors="replace")
            raise RequestFailed("HTTP error", route, body, resp.status_code, text)
        yield resp.aiter_lines()


def sse_data(line: str) -> str | None:
    return line[5:].strip() if line.startswith("data:") else None


# ---------------------------------------------------------------------------------------------
# The workload through each route, by raw httpx.


@dataclass(frozen=True)
class Workload:
    model: str
    max_tokens: int
    banned: tuple[int, ...]


def messages(prompt: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": prompt}]


def openai_body(w: Workload, prompt: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": w.model,
        "messages": messages(prompt),
        "max_tokens": w.max_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if w.banned:
        body["logit_bias"] = {str(t): BAN_BIAS for t in w.banned}
    return body


def anthropic_body(w: Workload, prompt: str) -> dict[str, Any]:
    return {
        "model": w.model,
        "messages": messages(prompt),
        "max_tokens": w.max_tokens,
        "temperature": 0.0,
        "stream": True,
    }


def ollama_options(w: Workload) -> dict[str, Any]:
    """The OpenAI route's sampling: greedy, no top-k/top-p, no repeat penalty (Ollama's
    defaults would add top_k 40, top_p 0.9 and repeat_penalty 1.1)."""
    return {"temperature": 0.0, "top_k": 0, "top_p": 1.0, "repeat_penalty": 1.0, "num_predict": w.max_tokens}


def ollama_body(w: Workload, prompt: str) -> dict[str, Any]:
    return {"model": w.model, "messages": messages(prompt), "stream": True, "options": ollama_options(w)}


async def raw_openai(client: httpx.AsyncClient, w: Workload, prompt: str) -> Reply:
    body = openai_body(w, prompt)
    return await with_deadline("openai", body, _raw_openai(client, body))


async def _raw_openai(client: httpx.AsyncClient, body: dict[str, Any]) -> Reply:
    t = Tracker()
    async with post_stream(client, "openai", "/v1/chat/completions", body) as lines:
        async for line in lines:
            data = sse_data(line)
            if data == "[DONE]":
                return t.reply("openai", body)
            if data:
                openai_event(t, _json("openai", body, data))
    raise RequestFailed("stream ended without [DONE]", "openai", body, 200, f"stop {t.stop}")


def openai_event(t: Tracker, event: dict[str, Any]) -> None:
    for choice in event.get("choices") or []:
        t.text((choice.get("delta") or {}).get("content"))
        t.stop = choice.get("finish_reason") or t.stop
    if event.get("usage"):
        t.tokens = int(event["usage"]["completion_tokens"])


async def raw_anthropic(client: httpx.AsyncClient, w: Workload, prompt: str) -> Reply:
    body = anthropic_body(w, prompt)
    return await with_deadline("anthropic", body, _raw_anthropic(client, body))


async def _raw_anthropic(client: httpx.AsyncClient, body: dict[str, Any]) -> Reply:
    t = Tracker()
    async with post_stream(client, "anthropic", "/v1/messages", body) as lines:
        async for line in lines:
            data = sse_data(line)
            if data and anthropic_event(t, _json("anthropic", body, data)):
                return t.reply("anthropic", body)
    raise RequestFailed("stream ended without message_stop", "anthropic", body, 200, f"stop {t.stop}")


def anthropic_event(t: Tracker, event: dict[str, Any]) -> bool:
    """Record one event; True at message_stop."""
    kind = event.get("type")
    if kind == "content_block_delta":
        t.text(event["delta"].get("text"))
    elif kind == "message_delta":
        t.stop = event["delta"].get("stop_reason")
        t.tokens = int(event["usage"]["output_tokens"])
    return kind == "message_stop"


async def raw_ollama(client: httpx.AsyncClient, w: Workload, prompt: str) -> Reply:
    body = ollama_body(w, prompt)
    return await with_deadline("ollama", body, _raw_ollama(client, body))


async def _raw_ollama(client: httpx.AsyncClient, body: dict[str, Any]) -> Reply:
    t = Tracker()
    async with post_stream(client, "ollama", "/api/chat", body) as lines:
        async for line in lines:
            if line.strip() and ollama_event(t, _json("ollama", body, line)):
                return t.reply("ollama", body)
    raise RequestFailed("stream ended without done", "ollama", body, 200, f"{t.text_events} text events")


def ollama_event(t: Tracker, event: dict[str, Any]) -> bool:
    """Record one NDJSON object; True at the final one (done)."""
    t.text((event.get("message") or {}).get("content"))
    if event.get("done"):
        t.stop = event.get("done_reason")
        t.tokens = int(event.get("eval_count", 0))
        return True
    return False


# ---------------------------------------------------------------------------------------------
# The same through the official clients.


@dataclass
class Official:
    """The three official async clients, pointed at one server."""

    openai: Any
    anthropic: Any
    ollama: Any

    @classmethod
    def connect(cls, base_url: str) -> Official:
        import anthropic
        import ollama
        import openai

        timeout = REQUEST_TIMEOUT.read or 300.0
        return cls(
            openai.AsyncOpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0, timeout=timeout),
            anthropic.AsyncAnthropic(base_url=base_url, api_key="unused", max_retries=0, timeout=timeout),
            ollama.AsyncClient(host=base_url, timeout=timeout),
        )

    async def close(self) -> None:
        for client in (self.openai, self.anthropic, self.ollama):
            await client.close()


async def official_call(route: str, body: dict[str, Any], coro: Awaitable[T]) -> T:
    """with_deadline, with the official clients' own errors (status errors, the Ollama
    client's ResponseError) as RequestFailed too."""
    try:
        return await with_deadline(route, body, coro)
    except RequestFailed:
        raise
    except Exception as exc:
        status = getattr(exc, "status_code", None)
        raise RequestFailed(
            "official client error", route, body, status, f"{type(exc).__name__}: {exc}"
        ) from exc


async def official_openai(o: Official, w: Workload, prompt: str) -> Reply:
    body = openai_body(w, prompt)
    return await official_call("openai", body, _official_openai(o, body))


async def _official_openai(o: Official, body: dict[str, Any]) -> Reply:
    t = Tracker()
    stream = await o.openai.chat.completions.create(**body)
    async for chunk in stream:
        openai_event(t, chunk.model_dump())
    return t.reply("openai", body)


async def official_anthropic(o: Official, w: Workload, prompt: str) -> Reply:
    body = anthropic_body(w, prompt)
    return await official_call("anthropic", body, _official_anthropic(o, body))


async def _official_anthropic(o: Official, body: dict[str, Any]) -> Reply:
    t = Tracker()
    known = {k: v for k, v in body.items() if k != "temperature"}  # not a parameter in every SDK
    stream = await o.anthropic.messages.create(**known, extra_body={"temperature": body["temperature"]})
    async for event in stream:
        anthropic_event(t, event.model_dump())
    return t.reply("anthropic", body)


async def official_ollama(o: Official, w: Workload, prompt: str) -> Reply:
    body = ollama_body(w, prompt)
    return await official_call("ollama", body, _official_ollama(o, body))


async def _official_ollama(o: Official, body: dict[str, Any]) -> Reply:
    t = Tracker()
    async for part in await o.ollama.chat(**body):
        ollama_event(t, part.model_dump())
    return t.reply("ollama", body)


# ---------------------------------------------------------------------------------------------
# Rounds: every client sends its prompts back to back; the routes take turns.

Send = Callable[[str], Awaitable[Reply]]


@dataclass
class Round:
    wall: float
    replies: list[Reply]

    @property
    def tokens(self) -> int:
        return sum(r.tokens for r in self.replies)


async def all_or_first_failure(coros: list[Coroutine[Any, Any, T]]) -> list[T]:
    """Run `coros` concurrently; on the first RequestFailed cancel the rest and raise it."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(c) for c in coros]
    except ExceptionGroup as eg:
        failures = [e for e in eg.exceptions if isinstance(e, RequestFailed)]
        if failures:
            raise failures[0] from None
        raise
    return [t.result() for t in tasks]


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
    per_client = await all_or_first_failure([client(mine) for mine in prompts])
    return Round(time.perf_counter() - start, [r for got in per_client for r in got])


async def interleaved(
    senders: dict[str, Send], sizes: Sizes, rounds: int, label: str
) -> dict[str, list[Round]]:
    """`rounds` rounds of A B C: each route's rounds, in order."""
    out: dict[str, list[Round]] = {name: [] for name in senders}
    for rnd in range(rounds):
        for name, send in senders.items():
            got = await run_round(send, round_prompts(f"{label}-{name}", rnd, sizes))
            _progress(f"{label} round {rnd + 1}/{rounds}: {name} {got.tokens / got.wall:.1f} tok/s")
            out[name].append(got)
    return out


async def warmup(senders: dict[str, Send], sizes: Sizes) -> dict[str, float]:
    """One request per route (then a concurrent burst, if `sizes` says so); returns each route's first
    request time to its last token (first-use costs show there, not in the rounds)."""
    first: dict[str, float] = {}
    for name, send in senders.items():
        _progress(f"warmup: {name}")
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
# Part 1: the routes side by side.


def workload_of(name: str, w: Workload) -> Workload:
    return replace(w, banned=()) if name == NO_BIAS else w


def raw_senders(clients: dict[str, httpx.AsyncClient], w: Workload) -> dict[str, Send]:
    fns = {"openai": raw_openai, NO_BIAS: raw_openai, "anthropic": raw_anthropic, "ollama": raw_ollama}
    return {name: partial(fns[name], clients[name], workload_of(name, w)) for name in ROUTES}


def official_senders(o: Official, w: Workload) -> dict[str, Send]:
    fns = {
        "openai": official_openai,
        NO_BIAS: official_openai,
        "anthropic": official_anthropic,
        "ollama": official_ollama,
    }
    return {name: partial(fns[name], o, workload_of(name, w)) for name in ROUTES}


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


# ---------------------------------------------------------------------------------------------
# Part 2: model switches and loads with -max-loaded 1.


async def first_token(client: httpx.AsyncClient, model: str) -> tuple[float, str]:
    """Seconds from sending a streamed chat request for `model` to its first generated text,
    and the model the reply names."""
    body = {
        "model": model,
        "messages": messages("Say hello."),
        "max_tokens": SWITCH_MAX_TOKENS,
        "temperature": 0.0,
        "stream": True,
    }
    return await with_deadline("openai", body, _first_token(client, body))


async def _first_token(client: httpx.AsyncClient, body: dict[str, Any]) -> tuple[float, str]:
    sent = time.perf_counter()
    async with post_stream(client, "openai", "/v1/chat/completions", body) as lines:
        async for line in lines:
            data = sse_data(line)
            if not data or data == "[DONE]":
                continue
            event = _json("openai", body, data)
            choice = (event.get("choices") or [{}])[0]
            if (choice.get("delta") or {}).get("content") or choice.get("finish_reason"):
                elapsed = time.perf_counter() - sent
                async for _ in lines:  # read to the end: the request finishes normally
                    pass
                return elapsed, str(event.get("model"))
    raise RequestFailed("no token in the stream", "openai", body, 200, "")


async def post_json(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    resp = await with_deadline("ollama", body, client.post(path, json=body))
    if resp.status_code != 200:
        raise RequestFailed(f"POST {path}", "ollama", body, resp.status_code, resp.text)
    out: dict[str, Any] = resp.json()
    return out


async def loaded_names(client: httpx.AsyncClient) -> list[str]:
    resp = await with_deadline("ollama", None, client.get("/api/ps"))
    return sorted(m["name"] for m in resp.json().get("models", []))


@dataclass
class SwitchLog:
    """Switch times one way, and any switch after which the server held other models."""

    times: list[float] = field(default_factory=list)
    anomalies: list[dict[str, Any]] = field(default_factory=list)


async def switch_to(client: httpx.AsyncClient, model: str, log: SwitchLog) -> None:
    elapsed, named = await first_token(client, model)
    log.times.append(elapsed)
    loaded = await loaded_names(client)
    if loaded != [model] or named != model:
        log.anomalies.append({"asked": model, "reply_model": named, "loaded_after": loaded})


async def load_alone(client: httpx.AsyncClient, model: str, reps: int) -> dict[str, Any]:
    """Load `model` into an empty server `reps` times: POST /api/load (client and server
    times), and a cold chat request's time to first token."""
    wall, server, cold = [], [], []
    for _ in range(reps):
        await post_json(client, "/api/reset", {})
        t0 = time.perf_counter()
        got = await post_json(client, "/api/load", {"model": model})
        wall.append(time.perf_counter() - t0)
        server.append(float(got.get("load_duration", 0)) / 1e9)
        await post_json(client, "/api/reset", {})
        cold.append((await first_token(client, model))[0])
    return {
        "load_s": statistics.median(wall),
        "server_load_duration_s": statistics.median(server),
        "cold_request_ttft_s": statistics.median(cold),
        "runs_load_s": wall,
        "runs_cold_request_ttft_s": cold,
    }


async def switch_times(base_url: str, sizes: Sizes) -> dict[str, Any]:
    a, b = SWITCH_MODELS
    logs = {f"{a} -> {b}": SwitchLog(), f"{b} -> {a}": SwitchLog()}
    async with httpx.AsyncClient(base_url=base_url, timeout=REQUEST_TIMEOUT, limits=LIMITS) as client:
        _progress("switch: warm")
        warm_a, _ = await first_token(client, a)
        first_log = SwitchLog()
        if sizes.first_switch_apart:  # the first switch pays one-off costs: kept apart
            await switch_to(client, b, first_log)
            await switch_to(client, a, first_log)
        for rep in range(sizes.switch_reps):
            _progress(f"switch {rep + 1}/{sizes.switch_reps}")
            await switch_to(client, b, logs[f"{a} -> {b}"])
            await switch_to(client, a, logs[f"{b} -> {a}"])
        loads = {}
        for m in SWITCH_MODELS:
            _progress(f"load alone: {m}")
            loads[m] = await load_alone(client, m, sizes.load_reps)
    return switch_report(logs, loads, first_log, warm_a)


def switch_report(
    logs: dict[str, SwitchLog], loads: dict[str, Any], first: SwitchLog, warm: float
) -> dict[str, Any]:
    switches = {
        way: {"median_s": statistics.median(log.times), "runs_s": log.times} for way, log in logs.items()
    }
    for way, entry in switches.items():  # switch minus the cold request: unloading and noise
        target = way.split(" -> ")[1]
        entry["minus_cold_request_s"] = entry["median_s"] - loads[target]["cold_request_ttft_s"]
    anomalies = [a for log in (*logs.values(), first) for a in log.anomalies]
    return {
        "max_loaded": 1,
        "switch_request": f"streamed /v1/chat/completions, max_tokens {SWITCH_MAX_TOKENS}, time to first token",
        "warm_request_ttft_s": warm,
        "first_switches_s": first.times,
        "switch": switches,
        "load": loads,
        "anomalies": anomalies,
    }


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


def serve_argv(port: int, model: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "llamay", "serve", "-m", model, "-addr", f"{HOST}:{port}", *extra]


async def guarded(server: Server, part: Coroutine[Any, Any, dict[str, Any]]) -> dict[str, Any]:
    """`part`'s result, or an "error" entry with the request, response and server log tail."""
    try:
        return await part
    except RequestFailed as exc:
        _progress(f"FAILED: {exc}")
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
    argv = serve_argv(port, w.model, "-concurrency", str(sizes.concurrency), "-max-loaded", "1")
    _progress(f"starting {' '.join(argv[1:])}")
    try:
        with running_server("apis", argv, port, "/health", timeout=300.0) as server:
            out = asyncio.run(both_parts(server, sizes, w, official))
            return {"server": {"command": argv[1:], "log": str(server.log_path)}, **out}
    except ServerError as exc:
        error = {"error": {"what": "server did not start", "detail": str(exc)}}
        return {"server": {"command": argv[1:]}, "routes": error, "model_switch": error}


def machine_info(load_start: tuple[float, float, float]) -> dict[str, Any]:
    cpus = os.cpu_count() or 1
    info: dict[str, Any] = {"cpus": cpus, "loadavg_start": load_start, "loadavg_end": os.getloadavg()}
    if load_start[0] > 0.5 * cpus:
        info["warning"] = (
            "other processes were using the CPUs (see loadavg): absolute speeds are distorted; the "
            "interleaved route ratios are meant to survive this, the switch and load times are not"
        )
    return info


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
            "machine": machine_info(load_start),
            "client": CLIENT_NOTE,
            "settings": {**asdict(sizes), "temperature": 0.0, "stream": True},
            "end_of_generation": {**EOS_NOTE, "banned_ids": list(w.banned)},
            **out,
        }
    )
    return 1 if "error" in out["routes"] or "error" in out["model_switch"] else 0


if __name__ == "__main__":
    sys.exit(main())

"""What every part of bench.apis shares: the sizes of a run, the HTTP limits, and one streamed
request's timing (Reply, Tracker) and failure (RequestFailed, which carries the request and the
response so that a failed run shows what went wrong)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from ..common import BadEvent, sse_event

T = TypeVar("T")
# The OpenAI route twice: as the workload asks (EOS banned), and without logit_bias, as the
# other two routes run: the pair tells the route's cost from the cost of the bias itself.
NO_BIAS = "openai_no_logit_bias"
ROUTES = ("openai", NO_BIAS, "anthropic", "ollama")
REQUEST_TIMEOUT = httpx.Timeout(connect=10.0, read=300.0, write=30.0, pool=300.0)
REQUEST_DEADLINE_S = 600.0
LIMITS = httpx.Limits(max_connections=64, max_keepalive_connections=64)


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


def progress(phase: str) -> None:
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


def event_json(route: str, body: Any, data: str) -> dict[str, Any]:
    try:
        return sse_event(data)
    except BadEvent as bad:
        raise RequestFailed(bad.problem, route, body, 200, data) from None


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


def messages(prompt: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": prompt}]

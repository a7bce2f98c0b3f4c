"""One streamed request (chat or completion), timed on the client, and llamay's draft counters.

Decode speed is taken from the client, the same way for every server: completion tokens after
the first, over the time from the first chunk carrying text to the last. Prefill (before the
first token) is left out, so a prompt the server had cached changes nothing.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from ..common import DONE, BadEvent, sse_data, sse_event
from ..serve.load import REQUEST_TIMEOUT, RequestFailed, within_deadline
from .workloads import Workload

__all__ = ["REQUEST_TIMEOUT", "Counters", "Reply", "counters", "stream"]


@dataclass
class Reply:
    """What one streamed request produced and when (time.perf_counter seconds)."""

    text: str
    completion_tokens: int
    finish_reason: str | None
    sent: float
    first: float  # first chunk with text
    last: float  # last chunk with text
    # llama-server's own figures from its final chunk (`timings`): draft_n, predicted_per_second, ...
    server_timings: dict[str, Any] = field(default_factory=dict)

    @property
    def decode_s(self) -> float:
        return self.last - self.first

    @property
    def tok_s(self) -> float:
        """Tokens after the first over the time between the first and the last."""
        span = self.decode_s
        return (self.completion_tokens - 1) / span if span > 0 and self.completion_tokens > 1 else math.nan

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "completion_tokens": self.completion_tokens,
            "chars": len(self.text),
            "finish_reason": self.finish_reason,
            "ttft_s": round(self.first - self.sent, 4),
            "decode_s": round(self.decode_s, 4),
            "tok_s": self.tok_s,
            # Servers may spell the same text in different tokens (a grammar does not force
            # the canonical split): characters per second compare the same work.
            "chars_s": len(self.text) / self.decode_s if self.decode_s > 0 else None,
        }
        t = self.server_timings
        if t:
            keep = ("predicted_per_second", "draft_n", "draft_n_accepted")
            out["server_timings"] = {k: t[k] for k in keep if k in t}
        return out


async def stream(client: httpx.AsyncClient, w: Workload) -> Reply:
    """Send `w` with stream=true and usage on; RequestFailed on an HTTP error, a broken or
    erroring stream, a missing token count, or no reply within the deadline."""
    body = {**w.body, "stream": True, "stream_options": {"include_usage": True}}
    return await within_deadline(_stream(client, w.path, body), body)


def _piece(choice: dict[str, Any]) -> str:
    """The text a chunk's choice carries: `delta.content` (chat) or `text` (completion)."""
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return delta.get("content") or ""
    return choice.get("text") or ""


async def _stream(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> Reply:
    sent = time.perf_counter()
    first = last = 0.0
    parts: list[str] = []
    finish: str | None = None
    tokens: int | None = None
    timings: dict[str, Any] = {}
    async with client.stream("POST", path, json=body) as resp:
        if resp.status_code != 200:
            text = (await resp.aread()).decode(errors="replace")
            raise RequestFailed("HTTP error", body, resp.status_code, text)
        async for line in resp.aiter_lines():
            data = sse_data(line)
            if data is None:
                continue
            if data == DONE:
                if tokens is None:
                    raise RequestFailed("no usage in the stream", body, 200, "".join(parts)[:500])
                return Reply("".join(parts), tokens, finish, sent, first or sent, last or sent, timings)
            try:
                event = sse_event(data)
            except BadEvent as bad:
                raise RequestFailed(bad.problem, body, 200, data) from None
            usage = event.get("usage")
            if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
                tokens = usage["completion_tokens"]
            if isinstance(event.get("timings"), dict):
                timings = event["timings"]
            for choice in event.get("choices") or []:
                piece = _piece(choice)
                if piece:
                    now = time.perf_counter()
                    first = first or now
                    last = now
                    parts.append(piece)
                finish = choice.get("finish_reason") or finish
    raise RequestFailed("stream ended without [DONE]", body, 200, "".join(parts)[:500])


@dataclass(frozen=True)
class Counters:
    """llamay's cumulative figures for the served model (from /v1/stats)."""

    draft_tokens: int
    draft_accepted_tokens: int
    decode_steps: int
    generated_tokens: int

    def minus(self, before: Counters) -> dict[str, Any]:
        drafted = self.draft_tokens - before.draft_tokens
        taken = self.draft_accepted_tokens - before.draft_accepted_tokens
        return {
            "draft_tokens": drafted,
            "draft_accepted_tokens": taken,
            "acceptance": taken / drafted if drafted else None,
            "decode_steps": self.decode_steps - before.decode_steps,
            "generated_tokens": self.generated_tokens - before.generated_tokens,
        }


async def counters(client: httpx.AsyncClient) -> Counters:
    """The first loaded model's counters (the benchmark serves one)."""
    resp = await client.get("/v1/stats")
    resp.raise_for_status()
    models = resp.json().get("models") or [{}]
    m = models[0]
    return Counters(
        int(m.get("draft_tokens", 0)),
        int(m.get("draft_accepted_tokens", 0)),
        int(m.get("decode_steps", 0)),
        int(m.get("generated_tokens", 0)),
    )

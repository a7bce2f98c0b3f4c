"""The chat workload of bench.apis as each route's request, sent by raw httpx or by the route's
official client (openai, anthropic, ollama), and the stream parsed into a Reply: a sender per route
takes a prompt and returns its Reply."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, TypeVar

import httpx

from ..common import sse_data
from .common import (
    NO_BIAS,
    REQUEST_TIMEOUT,
    ROUTES,
    Reply,
    RequestFailed,
    Tracker,
    event_json,
    messages,
    post_stream,
    with_deadline,
)

T = TypeVar("T")
BAN_BIAS = -100
# What the report says about the clients and about end of generation on each route.
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


# ---------------------------------------------------------------------------------------------
# The workload through each route, by raw httpx.


@dataclass(frozen=True)
class Workload:
    model: str
    max_tokens: int
    banned: tuple[int, ...]


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
                openai_event(t, event_json("openai", body, data))
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
            if data and anthropic_event(t, event_json("anthropic", body, data)):
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
            if line.strip() and ollama_event(t, event_json("ollama", body, line)):
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
# Senders: a prompt in, a Reply out, one per route with the workload bound.

Send = Callable[[str], Awaitable[Reply]]


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

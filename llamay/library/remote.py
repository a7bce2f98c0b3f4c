"""The remote backend: the same rounds over HTTP against a llamay server's
OpenAI-compatible routes (chat completions streamed as SSE, completions, contexts)."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import httpx

from ..errors import Conflict, EngineError, LlamayError
from .backend import ContextHandle, Reply
from .options import Ask, Options
from .remote_wire import chat_body, completion_body, error_from, score_results, sse_events
from .results import Chunk, ScoreResult, Timings, ToolCall, Usage

__all__ = ["RemoteBackend"]


class RemoteBackend:
    """A llamay server at `url`; `model` "" is the server's default model. Build with
    `await RemoteBackend.open(...)`, on the loop the backend will run on."""

    def __init__(self, client: httpx.AsyncClient, model: str, name: str) -> None:
        self._client = client
        self.model = model
        self.name = name
        self._open: set[str] = set()  # contexts made here and not closed yet

    @classmethod
    async def open(cls, url: str, model: str | None, api_key: str | None, timeout: float) -> RemoteBackend:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
        client = httpx.AsyncClient(
            base_url=url.rstrip("/"),
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=30.0),
            limits=limits,
        )
        try:
            health = await _json(client, "GET", "/health")
            loaded = [m.get("name", "") for m in health.get("models", [])]
            name = model or (loaded[0] if loaded else "")
        except BaseException:
            await client.aclose()
            raise
        return cls(client, model or "", name)

    # -- generation ------------------------------------------------------------------------
    async def generate(self, ask: Ask) -> AsyncIterator[Chunk | Reply]:
        try:
            async for item in self._generate(ask):
                yield item
        except Conflict:
            if ask.session is None or ask.session.id is None:
                raise
            # The context cannot take this prompt (it diverges from what the context holds,
            # as a template that rewrites history makes it): answer without it; the
            # conversation re-seeds its context afterwards.
            ask.session.stale = True
            async for item in self._generate(replace(ask, session=None)):
                yield item

    async def _generate(self, ask: Ask) -> AsyncIterator[Chunk | Reply]:
        t0 = time.perf_counter()
        first: float | None = None
        content, reasoning = "", ""
        calls: dict[int, dict[str, str]] = {}
        finish, message, usage = "stop", None, Usage()
        body = chat_body(self.model, ask)
        async with _stream(self._client, "/v1/chat/completions", body) as events:
            async for ev in events:
                if ev.get("usage"):
                    u = ev["usage"]
                    cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
                    usage = Usage(u.get("prompt_tokens", 0), u.get("completion_tokens", 0), cached)
                for choice in ev.get("choices") or []:
                    delta = choice.get("delta") or {}
                    said, thought = delta.get("content") or "", delta.get("reasoning_content") or ""
                    if (said or thought or delta.get("tool_calls")) and first is None:
                        first = time.perf_counter()
                    if thought:
                        reasoning += thought
                        yield Chunk(reasoning=thought, kind="reasoning")
                    if said:
                        content += said
                        yield Chunk(said)
                    for tc in delta.get("tool_calls") or []:
                        slot = calls.setdefault(tc.get("index", 0), {"id": "", "name": "", "arguments": ""})
                        fn = tc.get("function") or {}
                        slot["id"] = tc.get("id") or slot["id"]
                        slot["name"] = fn.get("name") or slot["name"]
                        slot["arguments"] += fn.get("arguments") or ""
                    if choice.get("finish_reason"):
                        finish = choice["finish_reason"]
                        message = choice.get("finish_message")
        end = time.perf_counter()
        first = first or end
        ordered = [calls[i] for i in sorted(calls)]
        yield Reply(
            content=content,
            reasoning=reasoning,
            calls=[ToolCall(c["id"], c["name"], _arguments(c["arguments"])) for c in ordered],
            raw_arguments=[c["arguments"] for c in ordered],
            finish_reason=finish,
            usage=usage,
            timings=Timings((first - t0) * 1000.0, (end - first) * 1000.0, 0.0, (end - t0) * 1000.0),
            finish_message=message,
        )

    async def generate_many(self, asks: list[Ask]) -> list[Reply]:
        import asyncio

        async def one(ask: Ask) -> Reply:
            reply = None
            async for item in self.generate(ask):
                if isinstance(item, Reply):
                    reply = item
            assert reply is not None
            return reply

        # Sent at once: the server's engine batches requests that arrive together.
        return list(await asyncio.gather(*(one(a) for a in asks)))

    async def complete(self, prompts: list[str], opts: Options) -> list[Reply]:
        import asyncio

        async def one(prompt: str) -> Reply:
            t0 = time.perf_counter()
            body = await _json(
                self._client, "POST", "/v1/completions", completion_body(self.model, prompt, opts)
            )
            total = (time.perf_counter() - t0) * 1000.0
            u = body.get("usage") or {}
            cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
            choice = body["choices"][0]
            return Reply(
                choice.get("text", ""),
                finish_reason=choice.get("finish_reason") or "stop",
                usage=Usage(u.get("prompt_tokens", 0), u.get("completion_tokens", 0), cached),
                timings=Timings(total_ms=total),
                finish_message=choice.get("finish_message"),
            )

        # One request per prompt, sent at once (the server batches them), so that each
        # reply has its own usage.
        return list(await asyncio.gather(*(one(p) for p in prompts)))

    async def score(self, prompt: str, continuations: list[str]) -> list[ScoreResult]:
        body = {
            "model": self.model,
            "prompt": [prompt + c for c in continuations],
            "echo": True,
            "logprobs": 1,
            "max_tokens": 0,
            "temperature": 0,
            "cache_prompt": False,
        }
        return score_results(await _json(self._client, "POST", "/v1/completions", body), continuations)

    # -- contexts --------------------------------------------------------------------------
    async def open_context(self, messages: list[dict[str, Any]]) -> ContextHandle:
        body = await _json(self._client, "POST", "/v1/contexts", {"model": self.model, "messages": messages})
        self._open.add(str(body["id"]))
        return ContextHandle(str(body["id"]))

    async def fork_context(self, handle: ContextHandle, messages: list[dict[str, Any]]) -> ContextHandle:
        if handle.id is None or handle.stale:
            return await self.open_context(messages)
        body = await _json(self._client, "POST", f"/v1/contexts/{handle.id}/fork", params={"n": "1"})
        self._open.add(str(body["data"][0]["id"]))
        return ContextHandle(str(body["data"][0]["id"]))

    async def close_context(self, handle: ContextHandle) -> None:
        if handle.id is not None:
            cid, handle.id = handle.id, None
            self._open.discard(cid)
            await _json(self._client, "DELETE", f"/v1/contexts/{cid}")

    async def stats(self) -> dict[str, Any]:
        body = await _json(self._client, "GET", "/v1/stats")
        models = body.get("models") or []
        found = next((m for m in models if m.get("name") == self.name), models[0] if models else {})
        return dict(found)

    async def aclose(self) -> None:
        """Delete the contexts this LLM made and did not close, then drop the connections."""
        try:
            for cid in list(self._open):
                with contextlib.suppress(LlamayError):  # gone already, or the server is
                    await _json(self._client, "DELETE", f"/v1/contexts/{cid}")
        finally:
            self._open.clear()
            await self._client.aclose()


async def _json(
    client: httpx.AsyncClient, method: str, path: str, body: Any = None, params: dict[str, str] | None = None
) -> Any:
    """One request; a non-2xx answer raises the LlamayError its error body names."""
    try:
        resp = await client.request(method, path, json=body, params=params)
    except httpx.HTTPError as exc:
        raise error_from(exc) from None
    if resp.status_code >= 400:
        raise error_from(resp)
    try:
        return resp.json()
    except ValueError:
        raise EngineError(f"{method} {path}: the server answered with something other than JSON") from None


class _stream:  # noqa: N801 - used as `async with _stream(...) as events`
    """POST a streaming request and iterate its SSE events (dicts); an error before the
    stream starts, or an error event inside it, raises LlamayError."""

    def __init__(self, client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> None:
        self._cm = client.stream("POST", path, json=body)
        self._resp: httpx.Response | None = None

    async def __aenter__(self) -> AsyncIterator[dict[str, Any]]:
        try:
            self._resp = await self._cm.__aenter__()
        except httpx.HTTPError as exc:
            raise error_from(exc) from None
        if self._resp.status_code >= 400:
            await self._resp.aread()
            error = error_from(self._resp)
            await self._cm.__aexit__(None, None, None)
            raise error
        return self._events(self._resp)

    async def __aexit__(self, *exc: Any) -> None:
        await self._cm.__aexit__(*exc)

    @staticmethod
    async def _events(resp: httpx.Response) -> AsyncIterator[dict[str, Any]]:
        try:
            async for ev in sse_events(resp.aiter_lines()):
                yield ev
        except httpx.HTTPError as exc:
            raise error_from(exc) from None


def _arguments(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}

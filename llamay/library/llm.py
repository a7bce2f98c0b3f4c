"""`llamay.LLM`: a model in this process (or on a llamay server) behind plain Python calls.

Every method exists blocking (`chat`) and awaitable (`achat`). Both kinds run on the
LLM's own background event loop, so any number of threads and tasks can share one LLM:
their requests meet in one engine, which decodes them together in batches.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from typing_extensions import Unpack

from ..errors import InvalidRequest
from .backend import Backend
from .context import Context
from .kwargs import ChatKw, CompleteKw
from .loop import LoopThread
from .options import Ask, MessagesIn, messages_of, options
from .results import ChatResult, Chunk, ScoreResult, Timings
from .turns import collect_chat, result_of, run_chat

__all__ = ["LLM", "Stream", "AsyncStream"]


class LLM:
    """A language model you call from Python.

    `LLM()` loads the default model in this process; `LLM("name")` or `LLM("file.gguf")`
    another (fetched on first use, like `llamay pull`). `LLM(url="http://host:11435")`
    drives a running `llamay serve` instead, with the same methods and results
    (`api_key` if it wants one; `model` then names a model on that server).

    In process: `ctx` context size in tokens (0: the model's, at most 8192), shared by
    the requests that run at once; `threads` CPU threads (0: all cores); `concurrency`
    requests decoded together (more wait in a queue); `batch` tokens per decode step;
    `kv` the KV cache type ("f16", "f32", "q8_0"); `max_tokens` the limit for structured
    output whose schema sets none and whose call gives none; `chat_template` a Jinja file
    overriding the model's; `progress` a function called with the fraction of the weights
    loaded (0.0 to 1.0) while they load. `timeout` (remote): seconds to wait for a reply.

    Loading happens here and may take a while; errors are `llamay.LlamayError`.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        url: str | None = None,
        api_key: str | None = None,
        ctx: int = 0,
        threads: int = 0,
        concurrency: int = 8,
        batch: int = 512,
        kv: str = "f16",
        max_tokens: int = 2048,
        chat_template: str | Path | None = None,
        timeout: float = 600.0,
        progress: Callable[[float], object] | None = None,
    ) -> None:
        self._loop = LoopThread()
        self._closed = False
        try:
            if url is not None:
                from .remote import RemoteBackend

                self._backend: Backend = self._loop.run(RemoteBackend.open(url, model, api_key, timeout))
            else:
                from .local import LocalBackend, LocalConfig

                config = LocalConfig(
                    ctx,
                    threads,
                    concurrency,
                    batch,
                    kv,
                    max_tokens,
                    Path(chat_template) if chat_template else None,
                    progress,
                )
                self._backend = self._loop.run(LocalBackend.open(model, config))
        except BaseException:
            self._loop.close()
            raise
        self.remote = url is not None

    @property
    def model(self) -> str:
        """The model's name (in process: as the store knows it; remote: as the server does)."""
        return self._backend.name

    def __repr__(self) -> str:
        where = "remote" if self.remote else "in process"
        return f"LLM({self.model!r}, {where})"

    # -- chat ------------------------------------------------------------------------------
    def chat(self, prompt: MessagesIn, **kw: Unpack[ChatKw]) -> ChatResult:
        """Answer `prompt` (a string: one user message; or a list of message dicts).

        Options: `system`, `max_tokens`, `temperature`, `top_p`, `top_k`, `min_p`, `seed`,
        `stop`; `output=` a type (Pydantic model, dataclass, TypedDict, Literal, Enum,
        `list[int]`, ...) or a JSON schema dict, enforced while sampling and returned in
        `.parsed`; `tools=` functions or `@llamay.tool`s, `tool_choice` ("auto", "none",
        "required" or a tool's name), `run_tools=True` to call them and answer in text
        (at most `max_tool_rounds` rounds of calls); `thinking` (False: no reasoning; an
        int: a reasoning budget in tokens). Raises OutputError when the answer does not
        parse into `output`."""
        return self._loop.run(self._chat(prompt, kw))

    async def achat(self, prompt: MessagesIn, **kw: Unpack[ChatKw]) -> ChatResult:
        """`chat`, awaitable from any event loop."""
        return await self._loop.call(self._chat(prompt, kw))

    async def _chat(self, prompt: MessagesIn, kw: dict[str, Any] | ChatKw) -> ChatResult:
        opts = options(**kw)
        return await collect_chat(self._backend, messages_of(prompt, opts.system), opts)

    def stream(self, prompt: MessagesIn, **kw: Unpack[ChatKw]) -> Stream:
        """`chat`, piece by piece: iterate for Chunks (`.text` is answer text, `.reasoning`
        reasoning text; tool calls and their results arrive as chunks of those kinds);
        `.result` is the whole ChatResult once the iteration ended. Leaving the loop
        early stops generation."""
        opts = options(**kw)
        messages = messages_of(prompt, opts.system)
        return Stream(self._loop.iterate(lambda: run_chat(self._backend, messages, opts)))

    def astream(self, prompt: MessagesIn, **kw: Unpack[ChatKw]) -> AsyncStream:
        """`stream` for `async for`."""
        opts = options(**kw)
        messages = messages_of(prompt, opts.system)
        return AsyncStream(self._loop.aiterate(lambda: run_chat(self._backend, messages, opts)))

    def chat_many(self, prompts: Sequence[MessagesIn], **kw: Unpack[ChatKw]) -> list[ChatResult]:
        """`chat` for each prompt, all submitted at once so the engine decodes them
        together; results in order. The options apply to every prompt."""
        return self._loop.run(self._chat_many(prompts, kw))

    async def achat_many(self, prompts: Sequence[MessagesIn], **kw: Unpack[ChatKw]) -> list[ChatResult]:
        """`chat_many`, awaitable."""
        return await self._loop.call(self._chat_many(prompts, kw))

    async def _chat_many(
        self, prompts: Sequence[MessagesIn], kw: dict[str, Any] | ChatKw
    ) -> list[ChatResult]:
        if isinstance(prompts, str):
            raise InvalidRequest("chat_many takes a list of prompts", param="prompts")
        opts = options(**kw)
        conversations = [messages_of(p, opts.system) for p in prompts]
        if not conversations:
            return []
        if (opts.tools and opts.tool_choice != "none") or opts.run_tools:
            # Each conversation may take its own number of tool rounds.
            return list(await asyncio.gather(*(collect_chat(self._backend, m, opts) for m in conversations)))
        asks = [Ask(m, opts, output=opts.output) for m in conversations]
        replies = await self._backend.generate_many(asks)
        return [
            result_of(r, opts, r.usage, r.timings, [], [*m, {"role": "assistant", "content": r.content}])
            for r, m in zip(replies, conversations, strict=True)
        ]

    # -- text, scores ----------------------------------------------------------------------
    def complete(self, prompt: str, **kw: Unpack[CompleteKw]) -> ChatResult:
        """Continue raw text (no chat template). Options: `max_tokens` (default: until the
        model stops or the context is full), sampling options, `stop`, `output`."""
        return self._loop.run(self._complete(prompt, kw))

    async def acomplete(self, prompt: str, **kw: Unpack[CompleteKw]) -> ChatResult:
        """`complete`, awaitable."""
        return await self._loop.call(self._complete(prompt, kw))

    async def _complete(self, prompt: str, kw: dict[str, Any] | CompleteKw) -> ChatResult:
        if not isinstance(prompt, str):
            raise InvalidRequest("complete takes a string", param="prompt")
        opts = options(**kw)
        (reply,) = await self._backend.complete([prompt], opts)
        return result_of(reply, opts, reply.usage, reply.timings, [], [])

    def score(self, prompt: str, continuations: str | Sequence[str]) -> list[ScoreResult]:
        """How likely the model finds each continuation after `prompt`: per-token and
        total log-probabilities, and whether it is the greedy continuation. The prompt is
        tokenized once and each continuation's tokens follow it; in process it is also
        computed once, every continuation sharing its KV, all scored in one batch."""
        return self._loop.run(self._score(prompt, continuations))

    async def ascore(self, prompt: str, continuations: str | Sequence[str]) -> list[ScoreResult]:
        """`score`, awaitable."""
        return await self._loop.call(self._score(prompt, continuations))

    async def _score(self, prompt: str, continuations: str | Sequence[str]) -> list[ScoreResult]:
        conts = [continuations] if isinstance(continuations, str) else list(continuations)
        if not conts:
            return []
        if not isinstance(prompt, str) or not all(isinstance(c, str) and c for c in conts):
            raise InvalidRequest(
                "score takes a prompt string and non-empty continuation strings", param="continuations"
            )
        return await self._backend.score(prompt, conts)

    # -- contexts --------------------------------------------------------------------------
    def context(self, system: str | None = None, messages: Sequence[dict[str, Any]] = ()) -> Context:
        """A conversation whose turns continue one computed prefix: `system` (and any
        `messages`) are computed once, here; each `chat` on the context reads only what is
        new. It is a server-held context: on the server (`/v1/contexts`) when remote, in
        this process's engine otherwise. See `Context`."""
        return self._loop.run(self._context(system, messages))

    async def acontext(self, system: str | None = None, messages: Sequence[dict[str, Any]] = ()) -> Context:
        """`context`, awaitable."""
        return await self._loop.call(self._context(system, messages))

    async def _context(self, system: str | None, messages: Sequence[dict[str, Any]]) -> Context:
        history = [dict(m) for m in messages]
        if system is not None:
            history.insert(0, {"role": "system", "content": system})
        if not history:
            raise InvalidRequest("a context needs a system prompt or messages", param="system")
        handle = await self._backend.open_context(history)
        return Context(self._loop, self._backend, handle, history)

    # -- the rest --------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """The engine's counters for this model: requests, prompt/cached/generated
        tokens, decode steps (remote: from the server's /v1/stats, which is admin-only)."""
        return self._loop.run(self._backend.stats())

    def close(self) -> None:
        """Stop the engine (in process) or the HTTP client (remote); idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._loop.run(self._backend.aclose())
        finally:
            self._loop.close()

    async def aclose(self) -> None:
        """`close`, awaitable."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._loop.call(self._backend.aclose())
        finally:
            await asyncio.to_thread(self._loop.close)

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> LLM:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class Stream:
    """The chunks of one streamed call; `result` once they are all read."""

    def __init__(self, items: Iterator[Chunk | ChatResult]) -> None:
        self._items = items
        self.result: ChatResult | None = None

    def __iter__(self) -> Iterator[Chunk]:
        try:
            for item in self._items:
                if isinstance(item, ChatResult):
                    self.result = item
                else:
                    yield item
        finally:
            self.close()  # a loop left early stops the generation now, not when collected

    def close(self) -> None:
        """Stop generation now (as leaving the loop early does)."""
        close = getattr(self._items, "close", None)
        if close is not None:
            close()

    @property
    def timings(self) -> Timings | None:
        return self.result.timings if self.result is not None else None


class AsyncStream:
    """`Stream` for `async for`. An `async for` left early stops the generation once the
    iterator is collected; `await stream.aclose()` stops it at once."""

    def __init__(self, items: AsyncIterator[Chunk | ChatResult]) -> None:
        self._items = items
        self.result: ChatResult | None = None

    def __aiter__(self) -> AsyncIterator[Chunk]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[Chunk]:
        try:
            async for item in self._items:
                if isinstance(item, ChatResult):
                    self.result = item
                else:
                    yield item
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        """Stop generation now."""
        close = getattr(self._items, "aclose", None)
        if close is not None:
            await close()

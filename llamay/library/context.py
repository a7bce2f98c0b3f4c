"""A conversation held as a computed prefix: `LLM.context(...)`."""

from __future__ import annotations

import asyncio
from typing import Any

from typing_extensions import Unpack

from ..errors import InvalidRequest
from .backend import Backend, ContextHandle
from .kwargs import ChatKw
from .loop import LoopThread
from .options import MessagesIn, messages_of, options
from .results import ChatResult
from .turns import collect_chat

__all__ = ["Context"]


class Context:
    """Messages computed once, continued by each turn.

    `chat(prompt)` answers after everything the context holds and, by default, keeps the
    turn (prompt and answer) so the next turn continues from there; `keep=False` answers
    without changing the context, so many questions (from many threads at once) can share
    one long instruction. `fork()` branches the conversation. `messages` is what it holds.

    The context is held as a server holds one: remote, by the server (`/v1/contexts`,
    `llamay_session`); in process, by the LLM's own engine, through the same context
    service. A turn reads only its new tokens, a fork copies no KV, and `close()` frees
    it. Turns that keep their messages run one at a time. When the chat template rewrites
    earlier turns, so that a turn no longer extends what the context holds, the turn is
    answered without it and a new context is computed for the turns that follow.
    """

    def __init__(
        self, loop: LoopThread, backend: Backend, handle: ContextHandle, messages: list[dict[str, Any]]
    ) -> None:
        """A context `handle` holding `messages`, whose turns run on `loop` through `backend`
        (an LLM's own: made by `LLM.context`)."""
        self._loop = loop
        self._backend = backend
        self._handle = handle
        self.messages = messages
        self._lock: asyncio.Lock | None = None  # created on the LLM's loop, where turns run

    @property
    def id(self) -> str | None:
        """The server's context id (remote), else None."""
        return self._handle.id

    def chat(self, prompt: MessagesIn, *, keep: bool = True, **kw: Unpack[ChatKw]) -> ChatResult:
        """A turn on the context; options as for `LLM.chat` (but no `system`: the context
        has its own)."""
        return self._loop.run(self._turn(prompt, keep, kw))

    async def achat(self, prompt: MessagesIn, *, keep: bool = True, **kw: Unpack[ChatKw]) -> ChatResult:
        """`chat`, awaitable."""
        return await self._loop.call(self._turn(prompt, keep, kw))

    async def _turn(self, prompt: MessagesIn, keep: bool, kw: dict[str, Any] | ChatKw) -> ChatResult:
        opts = options(**kw)
        if opts.system is not None:
            raise InvalidRequest("a context has its system prompt already", param="system")
        backend = self._backend
        if not keep:
            fork = await backend.fork_context(self._handle, self.messages)
            try:
                return await collect_chat(backend, self.messages + messages_of(prompt, None), opts, fork)
            finally:
                await backend.close_context(fork)
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            result = await collect_chat(
                backend, self.messages + messages_of(prompt, None), opts, self._handle
            )
            if self._handle.stale:
                # The server could not continue its context with this turn: hold the whole
                # conversation in a new one, computed once more, for the turns to come.
                await backend.close_context(self._handle)
                self._handle = await backend.open_context(result.messages)
            self.messages = result.messages
            return result

    def fork(self) -> Context:
        """A new context holding the same messages (a server fork: no recomputation)."""
        return self._loop.run(self._fork())

    async def afork(self) -> Context:
        return await self._loop.call(self._fork())

    async def _fork(self) -> Context:
        handle = await self._backend.fork_context(self._handle, self.messages)
        return Context(self._loop, self._backend, handle, list(self.messages))

    def close(self) -> None:
        """Free the context (remote: delete it on the server); idempotent."""
        self._loop.run(self._backend.close_context(self._handle))

    async def aclose(self) -> None:
        await self._loop.call(self._backend.close_context(self._handle))

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Context({len(self.messages)} messages, id={self.id!r})"

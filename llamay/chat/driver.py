"""The driver: a `Generation` (chat/pipeline.py) fed to a front end's `Renderer`.

A renderer is a plain object with four methods, each returning the frames (SSE or NDJSON
bytes, the library's chunks, ...) that one moment makes: `start(gen)` (the generation was
submitted; its number of choices is known), `delta(step)` (one token made something
visible in one choice), `done(step)` (one choice ended; after the last one, whatever
closes the answer too) and `error(exc)` (the generation failed after the answer began).
A renderer built for a whole answer returns no frames until the last `done`, which
returns exactly one: the body. `Frames` streams; `answer` returns the body. Both close
the generation however they end (which aborts its engine requests and frees their KV).
Nothing here knows an HTTP shape.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from typing import Generic, Protocol, TypeVar

from ..errors import EngineError, InternalError, LlamayError
from .pipeline import Choice, Delta, Done, Generation

__all__ = ["Renderer", "Frames", "answer", "Settle"]

F = TypeVar("F")
F_co = TypeVar("F_co", covariant=True)
log = logging.getLogger("llamay.chat")
Settle = Callable[[Choice], Awaitable[None]]


class Renderer(Protocol[F_co]):
    """A front end's answer, made from the pipeline's steps (see the module's docstring)."""

    def start(self, gen: Generation) -> Sequence[F_co]: ...

    def delta(self, step: Delta) -> Sequence[F_co]: ...

    def done(self, step: Done) -> Sequence[F_co]: ...

    def error(self, exc: LlamayError) -> Sequence[F_co]: ...


class Frames(Generic[F]):
    """The frames of a streamed answer: the renderer's start, its frames for each step,
    and on a failure its error frames (an unexpected exception is logged and reported as
    an internal error). `settle` is awaited after each choice's `done` and before its
    frames go out (to store what the answer made first); `cleanup` runs when the stream
    ends. Closing it, even before its first frame, closes the generation."""

    def __init__(
        self,
        gen: Generation,
        renderer: Renderer[F],
        *,
        settle: Settle | None = None,
        cleanup: Callable[[], None] | None = None,
    ) -> None:
        self._gen = gen
        self._cleanup = cleanup
        self._closed = False
        self._it = self._frames(renderer, settle)

    def __aiter__(self) -> AsyncIterator[F]:
        # The generator itself: iterating costs nothing of ours per frame. (Once only.)
        return self._it

    async def aclose(self) -> None:
        try:
            await self._it.aclose()
        finally:
            self._close()

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._gen.close()
        if self._cleanup is not None:
            self._cleanup()

    async def _frames(self, r: Renderer[F], settle: Settle | None) -> AsyncGenerator[F, None]:
        gen = self._gen
        try:
            for frame in r.start(gen):
                yield frame
            async for step in gen:
                if isinstance(step, Delta):
                    for frame in r.delta(step):
                        yield frame
                    continue
                frames = r.done(step)
                if settle is not None:
                    await settle(step.choice)
                for frame in frames:
                    yield frame
        except LlamayError as exc:
            for frame in r.error(exc):
                yield frame
        except Exception as exc:
            log.exception("a streamed answer failed")
            for frame in r.error(InternalError.of(exc)):
                yield frame
        finally:
            self._close()


async def answer(gen: Generation, r: Renderer[F], *, settle: Settle | None = None) -> F:
    """The whole answer: every step through `r` (built for a whole answer), then the one
    frame its last `done` returned. A failure is raised (LlamayError)."""
    last: Sequence[F] = ()
    try:
        r.start(gen)
        async for step in gen:
            if isinstance(step, Delta):
                r.delta(step)
                continue
            last = r.done(step)
            if settle is not None:
                await settle(step.choice)
    finally:
        gen.close()
    if len(last) != 1:  # pragma: no cover - merge ends after every finish
        raise EngineError("generation ended without a finish event")
    return last[0]

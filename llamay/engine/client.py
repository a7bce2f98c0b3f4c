"""Bridges the engine thread to callers: an async event stream for the HTTP layer and a
blocking iterator for in-process use (`llamay run`)."""

from __future__ import annotations

import asyncio
import queue
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

from ..types import ErrorEvent, Event, FinishEvent
from .request import GenerateRequest

if TYPE_CHECKING:  # the engine module loads llama.cpp; its callers hand an Engine in
    from .engine import Engine

__all__ = ["EventStream", "submit_all", "merge", "iter_events"]


class EventStream:
    """Submits at construction (so Overloaded / ContextOverflow surface before any
    response is started), then yields events until Finish or Error. `close()` (or
    leaving an `async with`) aborts the request if it is still running, freeing its KV."""

    def __init__(self, engine: Engine, request: GenerateRequest) -> None:
        self._listen()
        self.handle = engine.submit(request, self._sink)

    def _listen(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._events: asyncio.Queue[Event] = asyncio.Queue()
        self._done = False

    def _sink(self, event: Event) -> None:
        try:
            self._loop.call_soon_threadsafe(self._events.put_nowait, event)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            self.handle.abort()

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> Event:
        if self._done:
            raise StopAsyncIteration
        event = await self._events.get()
        if isinstance(event, FinishEvent | ErrorEvent):
            self._done = True
        return event

    def close(self) -> None:
        if not self._done:
            self._done = True
            self.handle.abort()


def submit_all(engine: Engine, requests: list[GenerateRequest]) -> list[EventStream]:
    """Submit every request or none, in one step: the engine's queue limit counts them all
    (a request with 64 prompts is 64 sequences), and a refusal queues nothing."""
    streams = [EventStream.__new__(EventStream) for _ in requests]
    for s in streams:
        s._listen()
    handles = engine.submit_many([(r, s._sink) for r, s in zip(requests, streams, strict=True)])
    for s, h in zip(streams, handles, strict=True):
        s.handle = h
    return streams


async def merge(streams: list[EventStream]) -> AsyncIterator[tuple[int, Event]]:
    """Interleave several streams as (index, event) in arrival order; closing the merged
    iterator closes (aborts) every stream still running."""
    if len(streams) == 1:
        try:
            async for ev in streams[0]:
                yield 0, ev
        finally:
            streams[0].close()
        return
    out: asyncio.Queue[tuple[int, Event | None]] = asyncio.Queue()

    async def pump(i: int, s: EventStream) -> None:
        async for ev in s:
            await out.put((i, ev))
        await out.put((i, None))

    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
    try:
        left = len(streams)
        while left:
            index, item = await out.get()
            if item is None:
                left -= 1
            else:
                yield index, item
    finally:
        for t in tasks:
            t.cancel()
        for s in streams:
            s.close()


def iter_events(engine: Engine, request: GenerateRequest) -> Iterator[Event]:
    """Blocking variant for in-process callers."""
    events: queue.SimpleQueue[Event] = queue.SimpleQueue()
    handle = engine.submit(request, events.put)
    try:
        while True:
            event = events.get()
            yield event
            if isinstance(event, FinishEvent | ErrorEvent):
                return
    finally:
        handle.abort()

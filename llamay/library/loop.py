"""One background asyncio loop per LLM, and the bridges to it.

Everything that touches the engine or the HTTP client runs on this loop, so threads and
event loops of any number share one engine (which batches them) through one place.
Synchronous callers block on a concurrent future; asynchronous callers await it with
`asyncio.wrap_future`, from any loop. Abandoning a call (a cancelled task, a stream left
early) cancels its coroutine on the background loop, which aborts the generation.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, TypeVar

from ..errors import InvalidRequest

__all__ = ["LoopThread"]

T = TypeVar("T")
_ITEM, _END, _FAIL = 0, 1, 2


class LoopThread:
    """A daemon thread running an event loop until `close()`."""

    def __init__(self, name: str = "llamay-library") -> None:
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()
        self._closed = False

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule `coro` on the loop; its future can be waited on from any thread."""
        if self._closed:
            coro.close()
            raise InvalidRequest("this LLM is closed")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the loop and block until it is done (from any thread but the
        loop's own, where waiting would deadlock)."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a blocking LLM method was called from inside the LLM's own loop")
        fut = self.submit(coro)
        try:
            return fut.result()
        except BaseException:
            fut.cancel()  # KeyboardInterrupt and the like: stop the work too
            raise

    async def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await `coro`, run on the loop, from the caller's own event loop."""
        return await asyncio.wrap_future(self.submit(coro))

    def iterate(self, make: Callable[[], AsyncIterator[T]]) -> Iterator[T]:
        """A blocking iterator over the async iterator `make()` run on the loop. Leaving
        it early cancels the producer."""
        items: queue.SimpleQueue[tuple[int, Any]] = queue.SimpleQueue()

        async def pump() -> None:
            try:
                async for item in make():
                    items.put((_ITEM, item))
            except BaseException as exc:
                items.put((_FAIL, exc))
                if isinstance(exc, asyncio.CancelledError):
                    raise
                return
            items.put((_END, None))

        fut = self.submit(pump())
        try:
            while True:
                kind, value = items.get()
                if kind == _ITEM:
                    yield value
                elif kind == _END:
                    return
                else:
                    raise value
        finally:
            fut.cancel()

    async def aiterate(self, make: Callable[[], AsyncIterator[T]]) -> AsyncIterator[T]:
        """`iterate` for a caller on another event loop."""
        caller = asyncio.get_running_loop()
        items: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()

        def put(entry: tuple[int, Any]) -> None:
            # A closed caller loop raises RuntimeError: nobody is listening any more.
            with contextlib.suppress(RuntimeError):
                caller.call_soon_threadsafe(items.put_nowait, entry)

        async def pump() -> None:
            try:
                async for item in make():
                    put((_ITEM, item))
            except BaseException as exc:
                put((_FAIL, exc))
                if isinstance(exc, asyncio.CancelledError):
                    raise
                return
            put((_END, None))

        fut = self.submit(pump())
        try:
            while True:
                kind, value = await items.get()
                if kind == _ITEM:
                    yield value
                elif kind == _END:
                    return
                else:
                    raise value
        finally:
            fut.cancel()

    def close(self, timeout: float = 30.0) -> None:
        """Stop the loop and join its thread; idempotent. Call after the work on it ended.
        Tasks still on the loop (a cancelled call winding down, a connection's reader) are
        cancelled and awaited first, so none is destroyed pending when the process exits."""
        if self._closed:
            return
        self._closed = True
        if self.loop.is_running() and threading.current_thread() is not self._thread:
            drained = asyncio.run_coroutine_threadsafe(self._drain(), self.loop)
            with contextlib.suppress(BaseException):
                drained.result(timeout)
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        if not self.loop.is_running():
            self.loop.close()

    async def _drain(self) -> None:
        """Cancel every other task on the loop and wait for them to finish, then close the
        async generators left open."""
        me = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks(self.loop) if t is not me and not t.done()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.loop.shutdown_asyncgens()

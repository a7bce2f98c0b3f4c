"""What a request must make durable before its answer says it succeeded.

A server that keeps contexts somewhere other than its own memory (a fleet replica, which
writes them to the fleet's shared state directory) sets `JOURNAL` for the requests it serves.
The chat pipeline and the context service then await `record(context_id)` after a context
was created, forked, restored, extended by a session turn or deleted, and before the answer
(or, streamed, its closing frames) goes out. Plain `llamay serve` sets nothing: the calls
cost a context-variable read.

The variable is per request (asyncio copies it into the tasks a request starts), so one
tenant's requests never run another's journal."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar

__all__ = ["JOURNAL", "Journal", "record"]

# Called with a context id whose state changed (or that is gone); returns once that state is
# durable. It raises a LlamayError (503) when it cannot make it so: the answer then fails
# instead of claiming a success that a lost machine would take back.
Journal = Callable[[str], Awaitable[None]]

JOURNAL: ContextVar[Journal | None] = ContextVar("llamay_journal", default=None)


async def record(*context_ids: str, journal: Journal | None = None) -> None:
    """Make each context's current state durable with `journal` (by default the current
    request's); nothing when there is none."""
    fn = journal if journal is not None else JOURNAL.get()
    if fn is None:
        return
    for cid in context_ids:
        await fn(cid)

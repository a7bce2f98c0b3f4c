"""The library's background loop leaves nothing pending when it closes: a call abandoned
mid-way (a stream left early, Ctrl-C) is cancelled and finished, not destroyed at exit with
asyncio's `Task was destroyed but it is pending!`."""

from __future__ import annotations

import asyncio
import gc
import threading

import pytest

from llamay.library.loop import LoopThread


def test_close_finishes_an_abandoned_call(caplog: pytest.LogCaptureFixture) -> None:
    loop = LoopThread()
    started = threading.Event()
    cleaned = threading.Event()

    async def forever() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.set()  # its own cleanup runs, as an aborted generation's does

    fut = loop.submit(forever())
    assert started.wait(10)
    loop.close()
    assert cleaned.is_set() and fut.cancelled()
    del fut
    gc.collect()
    assert "Task was destroyed" not in caplog.text
    assert loop.loop.is_closed()

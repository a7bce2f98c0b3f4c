"""A process pool where every task has its own time budget.

`run_tasks(fn, tasks, jobs=..., timeout=...)` runs `fn(task)` in `jobs` worker processes
and yields `(index, outcome)` as tasks finish, in completion order. A worker that runs
one task past `timeout` seconds is killed (a compiler stuck on one pathological schema
cannot hold up the rest) and replaced; its task yields TIMEOUT. A worker that dies
yields CRASHED for its task. Workers are also replaced every `recycle` tasks, which
bounds what per-process caches can grow to. With `jobs=0` tasks run in this process,
without time budgets (for tests and debugging).

Workers start with the "spawn" method, so `fn` must be importable by module and name,
and tasks and results must pickle.
"""

from __future__ import annotations

import multiprocessing
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Final

TIMEOUT: Final = "timeout"
CRASHED: Final = "crashed"


@dataclass(frozen=True)
class Done:
    """A task that returned (`value`) or raised (`error`, its type and message)."""

    value: Any = None
    error: str | None = None


Outcome = Done | str  # Done, TIMEOUT or CRASHED


def _serve(conn: Connection, fn: Callable[[Any], Any]) -> None:
    """Worker loop: receive a task, send back its Done, until the pipe says None."""
    while True:
        task = conn.recv()
        if task is None:
            return
        try:
            conn.send(Done(fn(task)))
        except Exception as exc:  # reported to the caller, who decides what it means
            conn.send(Done(error=f"{type(exc).__name__}: {exc}"[:500]))


class _Worker:
    def __init__(self, ctx: Any, fn: Callable[[Any], Any]) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, fn), daemon=True)
        self.proc.start()
        child.close()
        self.index: int | None = None
        self.started = 0.0
        self.served = 0

    def give(self, index: int, task: Any) -> None:
        self.index, self.started = index, time.monotonic()
        self.conn.send(task)

    def stop(self, *, kill: bool) -> None:
        if kill:
            self.proc.kill()
        else:
            try:
                self.conn.send(None)
            except OSError:
                self.proc.kill()
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.conn.close()


def run_tasks(
    fn: Callable[[Any], Any],
    tasks: Sequence[Any],
    *,
    jobs: int,
    timeout: float,
    recycle: int = 200,
) -> Iterator[tuple[int, Outcome]]:
    """Yield `(index into tasks, outcome)` for every task, as each finishes."""
    if jobs <= 0:
        for i, task in enumerate(tasks):
            try:
                yield i, Done(fn(task))
            except Exception as exc:
                yield i, Done(error=f"{type(exc).__name__}: {exc}"[:500])
        return
    ctx = multiprocessing.get_context("spawn")
    todo = deque(enumerate(tasks))
    workers = [_Worker(ctx, fn) for _ in range(min(jobs, len(tasks)))]
    try:
        for w in workers:
            if todo:
                w.give(*todo.popleft())
        while any(w.index is not None for w in workers):
            busy = [w for w in workers if w.index is not None]
            deadline = min(w.started for w in busy) + timeout
            ready = wait([w.conn for w in busy], timeout=max(0.0, deadline - time.monotonic()))
            for w in busy:
                outcome: Outcome | None = None
                if w.conn in ready:
                    try:
                        outcome = w.conn.recv()
                    except (EOFError, OSError):
                        outcome = CRASHED
                elif time.monotonic() - w.started >= timeout:
                    outcome = TIMEOUT
                if outcome is None:
                    continue
                index, w.index = w.index, None
                assert index is not None
                yield index, outcome
                w.served += 1
                if outcome in (TIMEOUT, CRASHED) or w.served >= recycle:
                    w.stop(kill=outcome in (TIMEOUT, CRASHED))
                    workers[workers.index(w)] = w = _Worker(ctx, fn)
                if todo:
                    w.give(*todo.popleft())
    finally:
        for w in workers:
            w.stop(kill=w.index is not None)

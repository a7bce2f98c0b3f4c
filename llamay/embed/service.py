"""`Encoder`: one encoder model behind a worker thread that batches sequences across callers.

Every caller's sequences join one FIFO queue.  The worker takes the oldest pending sequence and
as many more as fit (at most `max_seqs` sequences and `max_tokens` tokens per `llama_decode`;
8 short texts per call measured fastest, while one call with 100 texts ran 4x slower), so
concurrent requests share decodes and a large request does not hold the model for its whole
length.  Results are raw model outputs; normalisation is the caller's (see `llamay.embed.api`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np

from ..errors import EngineError

if TYPE_CHECKING:  # llama.cpp is loaded only when an encoder is opened
    from ..backend.encoder import EncoderContext, Pooling
    from ..backend.model import Model

__all__ = ["Encoder", "EncoderStats", "Kind", "default_threads"]

log = logging.getLogger("llamay.embed")

Kind = Literal["embed", "rank"]


def default_threads() -> int:
    """The CPU cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


@dataclass
class EncoderStats:
    """Counters since start: `decodes` (llama_decode calls), `sequences` and `tokens` encoded."""

    decodes: int = 0
    sequences: int = 0
    tokens: int = 0


@dataclass
class _Job:
    future: Future[np.ndarray]
    out: np.ndarray
    remaining: int


@dataclass
class _Item:
    job: _Job
    row: int
    tokens: list[int] = field(default_factory=list)


class Encoder:
    """An encoder model and its worker thread.  Thread-safe: `submit`, `run` and `encode` may
    be called from any thread or event loop at once.

    `name` is what the APIs report; `kind` is "embed" (pooled sentence vectors of `dim` floats)
    or "rank" (a cross-encoder: `dim` = 1 raw logit per query/document pair).  Sequences are
    token ids already framed (BOS/EOS) and at most `max_tokens` long; `llamay.embed.inputs`
    builds them from texts."""

    def __init__(self, name: str, model: Model, ctx: EncoderContext) -> None:
        self.name = name
        self.model = model
        self.ctx = ctx
        self.pooling: Pooling = ctx.pooling
        self.kind: Kind = "rank" if ctx.pooling == "rank" else "embed"
        self.dim = ctx.width
        self.max_tokens = ctx.max_tokens
        self.max_seqs = ctx.max_seqs
        self.bos_id, self.eos_id = model.bos_id, model.eos_id
        self.add_bos, self.add_eos = ctx.add_bos, ctx.add_eos
        self.stats = EncoderStats()
        self.loaded_at = time.time()
        self._pending: deque[_Item] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=f"encoder-{name}", daemon=True)
        self._thread.start()

    @classmethod
    def open(
        cls, name: str, path: Path, *, threads: int = 0, max_tokens: int = 0, max_seqs: int = 8
    ) -> Encoder:
        """Load the GGUF at `path` as an encoder named `name`.  `threads` 0 = all cores;
        `max_tokens` 0 = the model's trained context (at most 8192).  Raises ValueError for a
        model without pooling, FileNotFoundError / ValueError for a file llama.cpp cannot load."""
        from ..backend.encoder import EncoderConfig, EncoderContext
        from ..backend.model import Model

        model = Model(path)
        try:
            config = EncoderConfig(
                max_tokens=max_tokens, max_seqs=max_seqs, n_threads=threads or default_threads()
            )
            ctx = EncoderContext(model, config)
        except BaseException:
            model.close()
            raise
        return cls(name, model, ctx)

    # -- submitting ------------------------------------------------------------------------
    def submit(self, seqs: Sequence[Sequence[int]]) -> Future[np.ndarray]:
        """Queue `seqs`; the future gives a float32 array (len(seqs), dim) of raw outputs, in
        order.  Raises ValueError at once for a sequence the model cannot take (empty, longer
        than `max_tokens`, ids outside the vocabulary), EngineError after `close`.  Cancelling
        the future drops its sequences that have not been decoded yet."""
        n_vocab = self.model.n_vocab
        for i, s in enumerate(seqs):
            if not 0 < len(s) <= self.max_tokens:
                raise ValueError(f"sequence {i} has {len(s)} tokens; 1..{self.max_tokens} are accepted")
            if not all(0 <= t < n_vocab for t in s):
                raise ValueError(f"sequence {i} has a token id outside the vocabulary (0..{n_vocab - 1})")
        job = _Job(Future(), np.empty((len(seqs), self.dim), dtype=np.float32), len(seqs))
        if not seqs:
            job.future.set_running_or_notify_cancel()
            job.future.set_result(job.out)
            return job.future
        with self._cond:
            if self._closed:
                raise EngineError(f"encoder {self.name} is closed")
            self._pending.extend(_Item(job, i, list(s)) for i, s in enumerate(seqs))
            self._cond.notify()
        return job.future

    def run(self, seqs: Sequence[Sequence[int]]) -> np.ndarray:
        """`submit` and wait: for threads that may block (the CLI, tests)."""
        return self.submit(seqs).result()

    async def encode(self, seqs: Sequence[Sequence[int]]) -> np.ndarray:
        """`submit` and await without blocking the event loop; cancelling the awaiting task
        drops the sequences not yet decoded."""
        return await asyncio.wrap_future(self.submit(seqs))

    @property
    def queue_depth(self) -> int:
        """Sequences waiting for a decode."""
        with self._cond:
            return len(self._pending)

    # -- worker ----------------------------------------------------------------------------
    def _take_group(self) -> list[_Item]:
        """The oldest live sequence and the next ones that still fit one decode (called with
        the lock held).  Sequences of cancelled or failed jobs are dropped on the way."""
        group: list[_Item] = []
        budget = self.max_tokens
        kept: deque[_Item] = deque()
        while self._pending:
            item = self._pending.popleft()
            if item.job.future.done():  # cancelled, or failed by an earlier decode
                continue
            if len(group) < self.max_seqs and len(item.tokens) <= budget:
                group.append(item)
                budget -= len(item.tokens)
            else:
                kept.append(item)
            if len(group) == self.max_seqs or budget == 0:
                break
        kept.extend(self._pending)
        self._pending = kept
        return group

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                group = self._take_group()
            if group:
                self._decode(group)

    def _decode(self, group: list[_Item]) -> None:
        try:
            out = self.ctx.encode([item.tokens for item in group])
        except Exception as exc:
            log.error("encoder %s: decode of %d sequences failed: %s", self.name, len(group), exc)
            for item in group:
                self._fail(item.job, EngineError(f"encoding failed: {exc}"))
            return
        self.stats.decodes += 1
        self.stats.sequences += len(group)
        self.stats.tokens += sum(len(item.tokens) for item in group)
        for item, row in zip(group, out, strict=True):
            job = item.job
            job.out[item.row] = row
            job.remaining -= 1
            if job.remaining == 0 and job.future.set_running_or_notify_cancel():
                job.future.set_result(job.out)

    @staticmethod
    def _fail(job: _Job, exc: Exception) -> None:
        if job.remaining > 0 and job.future.set_running_or_notify_cancel():
            job.future.set_exception(exc)
        job.remaining = 0

    # -- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the worker (after its current decode), fail what is still queued with
        EngineError, free the context and the model.  Safe to call twice."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            pending, self._pending = self._pending, deque()
            self._cond.notify_all()
        self._thread.join()
        for item in pending:
            self._fail(item.job, EngineError(f"encoder {self.name} closed"))
        self.ctx.close()
        self.model.close()

    def __enter__(self) -> Encoder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""A draft model: a smaller model sharing the target's tokenizer guesses the next tokens
greedily, for speculation (engine/speculate.py) to check. Engine thread only.

The draft keeps its own llama context, one sequence per target sequence id. Before guessing
it reads what it has not seen of the target sequence's tokens (the prompt the first time;
then the tokens taken since, the last sampled one included), then decodes k greedy tokens,
all drafting sequences in one batch per depth; the KV of its guesses is dropped afterwards,
so what it holds is always a prefix of the target sequence's accepted tokens.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # llama.cpp is loaded by whoever builds the model, not by importing this
    from ..backend.context import Context
    from ..backend.model import Model

__all__ = ["DraftModel", "DraftTask", "same_tokenizer"]

log = logging.getLogger("llamay.engine")
DECODE_OK = 0  # backend.context.DecodeStatus.OK
CATCH_UP = 256  # positions the draft model reads per step at most to catch up


def same_tokenizer(a: Model, b: Model) -> bool:
    """Whether token ids mean the same bytes in `a` and `b` (so one's guesses are the other's)."""
    return a.n_vocab == b.n_vocab and a.pieces == b.pieces


@dataclass
class DraftTask:
    """Guess up to `depth` tokens after `tokens` (a target sequence's, last sampled included)
    for target sequence `seq`; `out` receives them."""

    seq: int
    owner: int  # the request's id: a sequence id taken over by another request starts afresh
    tokens: list[int]
    depth: int
    out: list[int] = field(default_factory=list)


class DraftModel:
    """Owns `model` and `ctx` (closed by `close`). `per_token` is the measured seconds a
    drafted token costs (a step of the draft model over every drafting sequence, per
    sequence), for the speculator to weigh against what a taken guess saves."""

    def __init__(self, model: Model, ctx: Context) -> None:
        self.model = model
        self.ctx = ctx
        self._seen: dict[int, tuple[int, int]] = {}  # target seq -> (request id, tokens its KV holds)
        self.per_token: float | None = None

    def close(self) -> None:
        self.ctx.close()
        self.model.close()

    def forget(self, seq: int) -> None:
        """Target sequence `seq` ended or was reused: drop what the draft holds for it."""
        if self._seen.pop(seq, None) is not None:
            self.ctx.seq_rm(seq)

    def retain(self, seqs: set[int]) -> None:
        """Forget every target sequence not in `seqs` (they ended)."""
        for seq in [s for s in self._seen if s not in seqs]:
            self.forget(seq)

    def guess(self, tasks: list[DraftTask]) -> None:
        """Fill each task's `out` with the draft model's greedy continuation (possibly fewer
        than `depth`: a task whose prefix the draft cannot read gets nothing)."""
        tasks = [t for t in tasks if t.depth > 0 and t.seq < self.ctx.n_seq_max]
        if not tasks:
            return
        t0 = time.perf_counter()
        live = self._catch_up(tasks)
        for _ in range(max((t.depth for t in live), default=0)):
            step = [t for t in live if len(t.out) < t.depth]
            if not step:
                break
            b = self.ctx.batch
            b.clear()
            rows = []
            for t in step:
                pos = len(t.tokens) + len(t.out) - 1
                if pos >= self.ctx.n_ctx:
                    continue
                rows.append((t, b.add(t.out[-1], pos, t.seq, True)))
            if not rows or self.ctx.decode() != DECODE_OK:
                break
            for t, row in rows:
                t.out.append(int(np.argmax(self._row(row))))
        for t in live:
            self.ctx.seq_rm(t.seq, len(t.tokens), -1)  # the guesses' KV
        spent = time.perf_counter() - t0
        drafted = sum(len(t.out) for t in live)
        if drafted:
            each = spent / drafted
            self.per_token = (
                each if self.per_token is None else self.per_token + 0.2 * (each - self.per_token)
            )

    def _catch_up(self, tasks: list[DraftTask]) -> list[DraftTask]:
        """Read what each task's draft sequence has not seen, in one decode of at most
        `CATCH_UP` positions (a long prompt is read over several steps, so the target's
        steps never wait long for it), and take the first guess of each task that is
        read to its end; those tasks are returned."""
        b = self.ctx.batch
        b.clear()
        ends: dict[int, int] = {}  # task index -> its last row
        for i, t in enumerate(tasks):
            owner, seen = self._seen.get(t.seq, (t.owner, 0))
            if owner != t.owner:
                self.ctx.seq_rm(t.seq)
                seen = 0
            seen = min(seen, len(t.tokens) - 1)  # the last token is read again for its logits
            self.ctx.seq_rm(t.seq, seen, -1)
            take = min(len(t.tokens) - seen, CATCH_UP - b.n, b.capacity - b.n)
            if take <= 0:
                self._seen[t.seq] = (t.owner, seen)
                continue
            for p in range(seen, seen + take):
                row = b.add(t.tokens[p], p, t.seq, p == len(t.tokens) - 1)
            self._seen[t.seq] = (t.owner, seen + take)
            if seen + take == len(t.tokens):
                ends[i] = row
        if b.n and self.ctx.decode() != DECODE_OK:
            for t in tasks:
                self.forget(t.seq)
            return []
        for i, row in ends.items():
            tasks[i].out.append(int(np.argmax(self._row(row))))
        return [tasks[i] for i in ends]

    def _row(self, row: int) -> np.ndarray:
        return self.ctx.logits(row)

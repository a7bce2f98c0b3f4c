"""One step's batch, from the scheduler's plan: the rows of each slice, the drafts fed after a
decoding sequence's last token (engine/speculate.py), and which rows give logits to whom."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence as Seq
from typing import Protocol

from .scheduler import Slice
from .sequence import Sequence

__all__ = ["fill"]


class BatchLike(Protocol):
    def clear(self) -> None: ...

    def add(self, token: int, pos: int, seq: int, logits: bool) -> int: ...


def fill(
    batch: BatchLike, plan: Seq[Slice], ready: Seq[Sequence], drafts: Mapping[int, tuple[list[int], int]]
) -> tuple[list[tuple[Sequence, int, int]], list[tuple[Sequence, int, int]]]:
    """Clear `batch` and add every slice of `plan` (slice i of `ready[i]`), then each decoding
    slice's drafts (`drafts`, by plan index) right after its row. Returns the rows to
    sample, as (sequence, batch row, plan index) with a slice's drafts in the rows after
    it, and the rows that score prompt tokens, as (sequence, prompt position, batch row)."""
    batch.clear()
    rows: list[tuple[Sequence, int, int]] = []
    scored: list[tuple[Sequence, int, int]] = []
    for sl in plan:
        s = ready[sl.index]
        last = sl.start + sl.count - 1
        score = s.request.prompt_logprobs is not None
        row = -1
        for pos in range(sl.start, sl.start + sl.count):
            # This row scores prompt token pos + 1.
            keep = score and s.request.score_from <= pos + 1 < s.n_prompt
            row = batch.add(s.tokens[pos], pos, s.seq_id, keep or (sl.logits and pos == last))
            if keep:
                scored.append((s, pos, row))
        if sl.logits:
            rows.append((s, row, sl.index))
        for j, token in enumerate(drafts.get(sl.index, ((), 0))[0]):
            batch.add(token, last + 1 + j, s.seq_id, True)  # rows after `row`, in order
    return rows, scored

"""Llama sequence ids and the KV cells they keep: running requests, a prefix cache of
finished ones, and pinned holders of server-held contexts.

Engine-thread only. KV operations go through a small `KvOps` interface so the policy is
tested without weights. With a unified KV cache `seq_cp` only tags cells with another
sequence id, so sharing a prefix costs no copy, and a cell lives while any sequence
still references it: dropping a cache entry never disturbs a request that copied from it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from .radix import RadixTree

__all__ = ["KvOps", "Entry", "SeqPool"]


class KvOps(Protocol):
    def seq_rm(self, seq: int, p0: int = -1, p1: int = -1) -> bool: ...
    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None: ...


@dataclass
class Entry:
    """A sequence kept after its request: KV for exactly `tokens`. `pins` counts the
    contexts that need it (pinned entries are never evicted, only spilled)."""

    seq: int
    tokens: list[int]
    last_used: float
    pins: int = 0
    extra: dict[str, object] = field(default_factory=dict)


class SeqPool:
    """Hands out sequence ids; keeps finished sequences as a prefix cache (LRU)."""

    def __init__(self, n_seq: int, ops: KvOps, budget: int | None = None) -> None:
        """`budget`: how many positions unpinned entries may hold in all. Every KV cell in
        use widens the attention of every later step (masked cells are still read), so a
        cache of prompts nobody repeats would slow everything down; LRU entries beyond the
        budget are dropped."""
        self.ops = ops
        self.budget = budget
        self.free: list[int] = list(range(n_seq))[::-1]
        self.entries: dict[int, Entry] = {}
        self.tree = RadixTree()
        self._clock = itertools.count(1)

    # -- ids ---------------------------------------------------------------------------
    def acquire(self) -> int | None:
        """A free sequence id (evicting the least recently used unpinned entry if none is
        free), or None when every id is running or pinned."""
        if not self.free and not self.evict_one():
            return None
        return self.free.pop()

    def release(self, seq: int) -> None:
        """Drop the KV of a sequence that is not an entry and free its id."""
        self.ops.seq_rm(seq)
        self.free.append(seq)

    # -- prefix cache ------------------------------------------------------------------
    def attach(self, seq: int, tokens: Sequence[int], limit: int) -> int:
        """Share into `seq` the cells of the longest cached prefix of `tokens`, at most
        `limit` tokens; returns how many positions `seq` now holds."""
        if limit <= 0 or not self.entries:
            return 0
        match = self.tree.longest(tokens[:limit], prefer={s: e.last_used for s, e in self.entries.items()})
        if match is None:
            return 0
        entry = self.entries[int(match.holder)]  # type: ignore[call-overload]
        entry.last_used = next(self._clock)
        self.ops.seq_cp(entry.seq, seq, 0, match.length)
        return match.length

    def keep(self, seq: int, tokens: Sequence[int], pins: int = 0) -> Entry:
        """Turn `seq` (holding KV for `tokens`) into an entry. Unpinned entries that are a
        prefix of it are dropped: this one serves every query they could."""
        entry = Entry(seq, list(tokens), next(self._clock), pins)
        for other in list(self.entries.values()):
            if (
                other.pins == 0
                and len(other.tokens) <= len(tokens)
                and other.tokens == entry.tokens[: len(other.tokens)]
            ):
                self.drop(other.seq)
        self.entries[seq] = entry
        self.tree.insert(seq, entry.tokens)
        self._trim()
        return entry

    def _trim(self) -> None:
        if self.budget is None:
            return
        while True:
            unpinned = [e for e in self.entries.values() if e.pins == 0]
            if sum(len(e.tokens) for e in unpinned) <= self.budget or len(unpinned) <= 1:
                return
            self.drop(min(unpinned, key=lambda e: e.last_used).seq)

    def touch(self, seq: int) -> None:
        self.entries[seq].last_used = next(self._clock)

    def drop(self, seq: int) -> None:
        """Forget an entry and free its id (its cells go once nothing else shares them)."""
        self.entries.pop(seq)
        self.tree.remove(seq)
        self.release(seq)

    def evict_one(self) -> bool:
        """Drop the least recently used unpinned entry; False if there is none."""
        candidates = [e for e in self.entries.values() if e.pins == 0]
        if not candidates:
            return False
        self.drop(min(candidates, key=lambda e: e.last_used).seq)
        return True

    def lru_pinned(self) -> Entry | None:
        pinned = [e for e in self.entries.values() if e.pins > 0]
        return min(pinned, key=lambda e: e.last_used) if pinned else None

    def cached_positions(self) -> int:
        return sum(len(e.tokens) for e in self.entries.values())

"""Llama sequence ids and the KV cells they keep: running requests, a prefix cache of
finished ones, and pinned holders of server-held contexts.

Engine-thread only. KV operations go through a small `KvOps` interface so the policy is
tested without weights. With a unified KV cache `seq_cp` only tags cells with another
sequence id, so sharing a prefix costs no copy, and a cell lives while any sequence
still references it: dropping a cache entry never disturbs a request that copied from it.

Unpinned entries that sit idle while other work is computed move to a RAM stash
(kv/stash.py) and come back from there on a hit.

Every entry belongs to a namespace (a plain string: a tenant, or `SHARED`). A request
attaches only to prefixes of its own namespace or of `SHARED`, so whether a prefix is
cached, and how much of it, says nothing about other tenants' prompts. The radix tree holds
each namespace's prefixes under a marker token of its own (a negative id no real token
has), so one lookup never crosses namespaces.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from .radix import Match, RadixTree
from .stash import Stash, Stashed

__all__ = ["KvOps", "Entry", "SeqPool", "SHARED"]

# The namespace of prefixes every tenant may attach to (an admin marked them shared).
SHARED = "shared"


class KvOps(Protocol):
    def seq_rm(self, seq: int, p0: int = -1, p1: int = -1) -> bool: ...
    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None: ...
    def seq_state(self, seq: int) -> bytes: ...
    def set_seq_state(self, seq: int, data: bytes) -> bool: ...


@dataclass
class Entry:
    """A sequence kept after its request: KV for exactly `tokens`. `pins` counts the
    contexts that need it (pinned entries are never evicted, only spilled)."""

    seq: int
    tokens: list[int]
    last_used: float
    pins: int = 0
    extra: dict[str, object] = field(default_factory=dict)
    computed_at: int = 0  # the pool's computed-token count when it was last used
    hits: int = 0  # cache hits served by this prefix (inherited along its line of entries)
    namespace: str = ""  # who may attach to it: this namespace (and SHARED: everyone)


class SeqPool:
    """Hands out sequence ids; keeps finished sequences as a prefix cache (LRU)."""

    def __init__(
        self,
        n_seq: int,
        ops: KvOps,
        budget: int | None = None,
        stash_bytes: int = 0,
        idle_after: int | None = 64,
    ) -> None:
        """`budget`: how many positions unpinned entries may hold in all, so that cached
        prefixes leave room for running requests (and, without flash attention, do not widen
        every later step's attention, which reads masked cells too); entries beyond it leave
        the KV cache (LRU). `stash_bytes` > 0 keeps the
        state of entries that leave in RAM, and an unpinned entry no running request shares
        leaves once `idle_after` tokens were computed since its last use, doubled for each hit
        it served (at most 64x): prefixes in steady use, like a shared system prompt, stay.
        `idle_after=None`: idle entries stay until the budget or KV pressure moves them (with
        flash attention, which skips other sequences' cells, an idle prefix costs other work
        next to nothing, and moving it costs a state copy on the engine thread)."""
        self.ops = ops
        self.budget = budget
        self.free: list[int] = list(range(n_seq))[::-1]
        self.entries: dict[int, Entry] = {}
        self.tree = RadixTree()
        self.stash = Stash(stash_bytes)
        self.idle_after = idle_after
        self.borrowed: dict[int, int] = {}  # running seq -> the entry it shares cells with
        self.loaded_hits: dict[int, int] = {}  # running seq -> hits of the stashed prefix it loaded
        self.computed = 0
        self._clock = itertools.count(1)
        self._markers: dict[str, int] = {}
        self.stash_ns: dict[str, str] = {}  # stash key -> its namespace

    # -- ids ---------------------------------------------------------------------------
    def acquire(self) -> int | None:
        """A free sequence id (evicting the least recently used unpinned entry if none is
        free), or None when every id is running or pinned."""
        if not self.free and not self.evict_one():
            return None
        return self.free.pop()

    def release(self, seq: int) -> None:
        """Drop the KV of a sequence that is not an entry and free its id."""
        self.borrowed.pop(seq, None)
        self.loaded_hits.pop(seq, None)
        self.ops.seq_rm(seq)
        self.free.append(seq)

    # -- prefix cache ------------------------------------------------------------------
    def attach(self, seq: int, tokens: Sequence[int], limit: int, namespace: str = "") -> int:
        """Share into `seq` the cells of the longest cached prefix of `tokens` that
        `namespace` may use (its own or SHARED), at most `limit` tokens (loading it from the
        stash if it is there); returns how many positions `seq` now holds."""
        if limit <= 0 or not (self.entries or self.stash):
            return 0
        ranks = self._ranks()
        found = [m for ns in {namespace, SHARED} if (m := self._longest(ns, tokens[:limit], ranks))]
        if not found:
            return 0
        match = max(found, key=lambda m: (m.length, ranks.get(m.holder, 0.0)))
        length = match.length - 1  # the namespace marker is not a position
        if isinstance(match.holder, str):
            item = self.stash.get(match.holder)
            item.hits += 1
            n = self._load(seq, item, length)
            if n:
                self.loaded_hits[seq] = item.hits
            return n
        entry = self.entries[int(match.holder)]  # type: ignore[call-overload]
        entry.hits += 1
        entry.last_used = next(self._clock)
        entry.computed_at = self.computed
        self.borrowed[seq] = entry.seq
        self.ops.seq_cp(entry.seq, seq, 0, length)
        return length

    def _marker(self, namespace: str) -> int:
        return self._markers.setdefault(namespace, -1 - len(self._markers))

    def _key(self, namespace: str, tokens: Sequence[int]) -> list[int]:
        return [self._marker(namespace), *tokens]

    def _longest(self, namespace: str, tokens: Sequence[int], ranks: dict[Hashable, float]) -> Match | None:
        if namespace not in self._markers:
            return None
        match = self.tree.longest(self._key(namespace, tokens), prefer=ranks)
        return match if match is not None and match.length > 1 else None

    def _ranks(self) -> dict[Hashable, float]:
        # On equal length a resident entry wins: sharing its cells is free, loading is not.
        ranks: dict[Hashable, float] = {s: float(e.last_used) + 1e15 for s, e in self.entries.items()}
        ranks.update({k: float(i) for i, k in enumerate(self.stash.items)})
        return ranks

    def _load(self, seq: int, item: Stashed, length: int) -> int:
        """Bring a stashed prefix into `seq`, cut to `length`. llama.cpp needs one free run
        of cells for it: idle cached prefixes give way first. 0 if it cannot fit."""
        while not self.ops.set_seq_state(seq, item.state):
            if not self.evict_one():
                return 0
        if length < len(item.tokens):
            self.ops.seq_rm(seq, length, -1)
        return length

    def keep(self, seq: int, tokens: Sequence[int], pins: int = 0, namespace: str = "") -> Entry:
        """Turn `seq` (holding KV for `tokens`) into an entry of `namespace`. Unpinned
        entries and stashed prefixes of the same namespace that are a prefix of it are
        dropped: this one serves every query they could, and inherits their hit count (and
        that of the prefix `seq` started from)."""
        entry = Entry(seq, list(tokens), next(self._clock), pins, namespace=namespace)
        hits = [self.loaded_hits.pop(seq, 0)]
        source = self.borrowed.pop(seq, None)
        if source is not None and source in self.entries:
            hits.append(self.entries[source].hits)
        for other in list(self.entries.values()):
            if other.pins == 0 and other.namespace == namespace and _is_prefix(other.tokens, entry.tokens):
                hits.append(other.hits)
                self.drop(other.seq)
        hits += self._unstash_prefixes(entry.tokens, namespace)
        entry.hits = max(hits)
        entry.computed_at = self.computed
        self.entries[seq] = entry
        self.tree.insert(seq, self._key(namespace, entry.tokens))
        self._trim()
        return entry

    def _trim(self) -> None:
        if self.budget is None:
            return
        while True:
            unpinned = [e for e in self.entries.values() if e.pins == 0]
            if sum(len(e.tokens) for e in unpinned) <= self.budget or len(unpinned) <= 1:
                return
            self._leave(min(unpinned, key=lambda e: e.last_used))

    def age(self, n_tokens: int) -> None:
        """Count `n_tokens` just computed; idle unpinned entries that no running request
        shares move to the stash (when there is one)."""
        self.computed += n_tokens
        self.expect(0)

    def expect(self, n_tokens: int) -> None:
        """`n_tokens` are about to be computed: entries that would be idle by then leave
        now, before the new work takes its cells, so the work lands in the cells they free
        (the attention of every step spans up to the highest cell in use)."""
        if not self.stash.capacity or self.idle_after is None:
            return
        busy = set(self.borrowed.values())
        for e in list(self.entries.values()):
            idle = self.computed + n_tokens - e.computed_at
            if e.pins == 0 and e.seq not in busy and idle >= self.idle_after << min(e.hits, 6):
                self._leave(e)

    def _leave(self, entry: Entry) -> None:
        """Take an unpinned entry out of the KV cache, keeping its state in the stash."""
        if self.stash.capacity and entry.tokens:
            item, evicted = self.stash.add(list(entry.tokens), self.ops.seq_state(entry.seq), entry.hits)
            for key in evicted:
                self.tree.remove(key)
                self.stash_ns.pop(key, None)
            if item is not None:
                self._unstash_prefixes(item.tokens, entry.namespace, spare=item)
                self.stash_ns[item.key] = entry.namespace
                self.tree.insert(item.key, self._key(entry.namespace, item.tokens))
        self.drop(entry.seq)

    def _unstash(self, key: str) -> None:
        self.stash.remove(key)
        self.tree.remove(key)
        self.stash_ns.pop(key, None)

    def _unstash_prefixes(self, tokens: list[int], namespace: str, spare: Stashed | None = None) -> list[int]:
        """Drop stashed prefixes of `tokens` in `namespace` (all but `spare`): whatever
        holds `tokens` serves every query they could. Returns their hit counts."""
        gone = [
            i
            for i in self.stash.items.values()
            if i is not spare and self.stash_ns.get(i.key) == namespace and _is_prefix(i.tokens, tokens)
        ]
        for item in gone:
            self._unstash(item.key)
        return [item.hits for item in gone]

    def touch(self, seq: int) -> None:
        self.entries[seq].last_used = next(self._clock)

    def drop(self, seq: int) -> None:
        """Forget an entry and free its id (its cells go once nothing else shares them)."""
        self.entries.pop(seq)
        self.tree.remove(seq)
        for running in [r for r, src in self.borrowed.items() if src == seq]:
            del self.borrowed[running]  # the id may soon hold another entry
        self.release(seq)

    def evict_one(self) -> bool:
        """Move the least recently used unpinned entry out of the KV cache (to the stash,
        if there is one); False if there is none."""
        candidates = [e for e in self.entries.values() if e.pins == 0]
        if not candidates:
            return False
        self._leave(min(candidates, key=lambda e: e.last_used))
        return True

    def lru_pinned(self) -> Entry | None:
        pinned = [e for e in self.entries.values() if e.pins > 0]
        return min(pinned, key=lambda e: e.last_used) if pinned else None

    def cached_positions(self) -> int:
        return sum(len(e.tokens) for e in self.entries.values())


def _is_prefix(short: list[int], long: list[int]) -> bool:
    return len(short) <= len(long) and short == long[: len(short)]

"""Host-RAM tier of the prefix cache: KV state bytes of prefixes that left the KV cache.

Prefixes leave the KV cache when it is under pressure or past the cache's budget, and
without flash attention also when idle: there every step reads every KV cell up to the
highest one in use, so a cached prefix nobody is using slows down every token computed while
it sits in the cache. Moving it to RAM costs one state copy (~25 µs per position for SmolLM2)
and bringing it back another (~15 µs), against ~3 ms per position to recompute it.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

__all__ = ["Stashed", "Stash"]


@dataclass
class Stashed:
    """State bytes of a sequence that held KV for exactly `tokens` (positions 0..n-1)."""

    key: str
    tokens: list[int]
    state: bytes
    hits: int = 0  # cache hits it served, carried back when it is loaded and kept again


class Stash:
    """Least-recently-used store of `Stashed` entries within `capacity` bytes."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.items: OrderedDict[str, Stashed] = OrderedDict()
        self.bytes = 0
        self._next = 0

    def __len__(self) -> int:
        return len(self.items)

    def add(self, tokens: list[int], state: bytes, hits: int = 0) -> tuple[Stashed | None, list[str]]:
        """Store `state`; returns the new entry (None when it alone exceeds the capacity)
        and the keys of the entries evicted to make room."""
        if len(state) > self.capacity:
            return None, []
        self._next += 1
        item = Stashed(f"ram:{self._next}", tokens, state, hits)
        self.items[item.key] = item
        self.bytes += len(state)
        evicted: list[str] = []
        while self.bytes > self.capacity:
            key, old = self.items.popitem(last=False)
            self.bytes -= len(old.state)
            evicted.append(key)
        return item, evicted

    def get(self, key: str) -> Stashed:
        """The entry under `key`, now the most recently used."""
        self.items.move_to_end(key)
        return self.items[key]

    def remove(self, key: str) -> None:
        old = self.items.pop(key)
        self.bytes -= len(old.state)

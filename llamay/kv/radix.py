"""A radix tree over token ids: which holder (a llama sequence that keeps KV cells) holds
which token prefix. Pure Python, no llama.cpp: the engine decides what the answers mean.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

__all__ = ["RadixTree", "Match"]


@dataclass
class _Node:
    edge: tuple[int, ...] = ()
    children: dict[int, _Node] = field(default_factory=dict)
    parent: _Node | None = None
    holders: set[Hashable] = field(default_factory=set)  # entries whose tokens end exactly here


@dataclass(frozen=True)
class Match:
    """`length` leading tokens of the query are held by `holder` (a prefix of its tokens)."""

    holder: Hashable
    length: int


class RadixTree:
    """Entries are (key, tokens); keys are unique. `longest(tokens)` finds the entry
    sharing the longest prefix with `tokens` (ties: the entry `prefer` ranks highest)."""

    def __init__(self) -> None:
        self._root = _Node()
        self._where: dict[Hashable, tuple[_Node, int]] = {}

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._where

    def insert(self, key: Hashable, tokens: Sequence[int]) -> None:
        if key in self._where:
            self.remove(key)
        node = self._root
        rest = tuple(tokens)
        while rest:
            child = node.children.get(rest[0])
            if child is None:
                child = _Node(edge=rest, parent=node)
                node.children[rest[0]] = child
                node, rest = child, ()
                break
            common = _common(child.edge, rest)
            if common < len(child.edge):
                child = self._split(child, common)
            node, rest = child, rest[common:]
        node.holders.add(key)
        self._where[key] = (node, len(tokens))

    def remove(self, key: Hashable) -> None:
        node, _ = self._where.pop(key)
        node.holders.discard(key)
        # Prune empty leaves and merge single-child chains so the tree stays compact.
        while node.parent is not None and not node.holders and not node.children:
            parent = node.parent
            del parent.children[node.edge[0]]
            node = parent
        if node.parent is not None and not node.holders and len(node.children) == 1:
            (only,) = node.children.values()
            node.edge = node.edge + only.edge
            node.children = only.children
            node.holders = only.holders
            for c in node.children.values():
                c.parent = node
            for h in node.holders:
                self._where[h] = (node, self._where[h][1])

    def longest(self, tokens: Sequence[int], prefer: dict[Hashable, float] | None = None) -> Match | None:
        """The entry sharing the longest prefix with `tokens`, or None if none shares one."""
        node = self._root
        matched = 0
        q = tuple(tokens)
        best_node = None
        while matched < len(q):
            child = node.children.get(q[matched])
            if child is None:
                break
            common = _common(child.edge, q[matched:])
            matched += common
            best_node = child
            if common < len(child.edge):
                break
            node = child
        if best_node is None or matched == 0:
            return None
        holder = self._pick(best_node, prefer or {})
        return Match(holder, matched) if holder is not None else None

    def tokens_of(self, key: Hashable) -> int:
        return self._where[key][1]

    def _pick(self, node: _Node, prefer: dict[Hashable, float]) -> Hashable | None:
        best: Hashable | None = None
        stack = [node]
        while stack:
            n = stack.pop()
            for h in n.holders:
                if best is None or prefer.get(h, 0.0) > prefer.get(best, 0.0):
                    best = h
            stack.extend(n.children.values())
        return best

    @staticmethod
    def _split(child: _Node, at: int) -> _Node:
        parent = child.parent
        assert parent is not None
        mid = _Node(edge=child.edge[:at], parent=parent)
        parent.children[mid.edge[0]] = mid
        child.edge = child.edge[at:]
        child.parent = mid
        mid.children[child.edge[0]] = child
        return mid


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i

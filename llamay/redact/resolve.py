"""Overlap resolution: from candidates of all detectors, keep a non-overlapping set.

The longest candidate wins; between equally long ones, the one starting earlier, then the
one whose detector comes first in the registry. Greedy in that order, which is exact for
this rule: a candidate is dropped only for one that beats it.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import NamedTuple

__all__ = ["Candidate", "resolve"]


class Candidate(NamedTuple):
    start: int
    end: int
    rank: int  # the detector's position in the registry
    type: str
    key: str


def resolve(candidates: Iterable[Candidate]) -> list[Candidate]:
    """The winners, sorted by start; empty spans are ignored. O(n log n) comparisons."""
    ordered = sorted(
        (c for c in candidates if c.end > c.start), key=lambda c: (c.start - c.end, c.start, c.rank)
    )
    starts: list[int] = []
    kept: list[Candidate] = []  # sorted by start, pairwise disjoint
    for c in ordered:
        i = bisect.bisect_left(starts, c.end)
        # Kept spans are disjoint, so only the last one starting before c.end can reach c.
        if i and kept[i - 1].end > c.start:
            continue
        starts.insert(i, c.start)
        kept.insert(i, c)
    return kept

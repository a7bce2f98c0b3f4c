"""Scanning only near what an identifier must contain.

Python's `re` scans fastest from a literal; a detector whose pattern cannot start with one
first finds cheap hits (an "@", a pair of colons, a run of digits) and runs its full
pattern only on the windows around them. A window extends to whitespace on both sides, so
every whitespace-free token touching it lies wholly inside, and a pattern run there with
`finditer(text, start, end)` sees what it would see on the whole text (lookbehind looks
before `start`; the end of a window falls on whitespace, which the detectors' lookaheads
treat like the end of the text).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

__all__ = ["windows"]


def windows(text: str, hits: re.Pattern[str], margin: int = 0) -> Iterator[tuple[int, int]]:
    """Disjoint [start, end) windows, in order, covering `margin` characters either side of
    every match of `hits`, widened to whitespace (or the ends of `text`)."""
    cur_start, cur_end = -1, -1
    n = len(text)
    for m in hits.finditer(text):
        start, end = max(0, m.start() - margin), min(n, m.end() + margin)
        if start <= cur_end:  # overlaps the current window: it already reaches whitespace
            start = cur_start
            # ... and so does its end: scanning again from each hit would make a long
            # whitespace-free run with many hits ("a@a@a@...") quadratic.
            end = max(end, cur_end)
        else:
            while start > 0 and not text[start - 1].isspace():
                start -= 1
        while end < n and not text[end].isspace():
            end += 1
        if start != cur_start and cur_start >= 0:
            yield cur_start, cur_end
        cur_start, cur_end = start, max(end, cur_end)
    if cur_start >= 0:
        yield cur_start, cur_end

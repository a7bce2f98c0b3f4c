"""Incremental detokenizer and stop-string matcher, fed one token's bytes at a time.

A token's bytes need not end on a character boundary (byte-fallback tokens split "é" or an
emoji over several tokens), and a stop string may span any number of tokens. `TextStream`
therefore holds back (a) the bytes of an incomplete UTF-8 character and (b) the longest
tail of the decoded text that could still grow into a stop string, and releases everything
else. Released text is final: it never contains a stop string or any part of one.

Stop matching is greedy in time: as soon as a stop string is complete the stream stops,
cutting at the earliest position where any complete stop string starts (a longer stop
string that might have matched even earlier had more tokens come is not waited for; the
engine stops generating at that point anyway). Empty stop strings are ignored.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Push", "TextStream"]


@dataclass(frozen=True)
class Push:
    """The result of one `TextStream.push`.

    `text` may be released to the client now (possibly ""). `stopped` means a stop string
    matched: `text` is everything before it; the stop string and what follows are dropped.
    """

    text: str
    stopped: bool = False


class TextStream:
    """Turns token bytes into releasable text, honouring stop strings.

    Invalid UTF-8 becomes U+FFFD (never an exception). Call `flush()` once at the end; after
    `flush()` the stream is closed and `push()` raises RuntimeError. After a stop, `push()`
    returns `Push("", True)` and `flush()` returns "".
    """

    def __init__(self, stop: Sequence[str] = ()) -> None:
        # dict.fromkeys: drop empties and duplicates but keep order (deterministic ties).
        self._stops: tuple[str, ...] = tuple(dict.fromkeys(s for s in stop if s))
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""  # decoded but not yet released (a possible stop-string prefix)
        self._released: list[str] = []
        self._stopped = False
        self._closed = False

    @property
    def text(self) -> str:
        """All text released so far (by `push` and `flush`)."""
        if len(self._released) > 1:  # join lazily, once per change: cheap to call per token
            self._released = ["".join(self._released)]
        return self._released[0] if self._released else ""

    @property
    def stopped(self) -> bool:
        """True once a stop string has matched."""
        return self._stopped

    def push(self, piece: bytes) -> Push:
        """Add one token's bytes; return what can be released now."""
        if self._stopped:
            return Push("", True)
        if self._closed:
            raise RuntimeError("push() after flush(): the stream is closed")
        # The incremental decoder keeps an incomplete trailing character to itself.
        pending = self._pending + self._decoder.decode(piece)
        if not pending:
            return Push("")
        cut = self._find_stop(pending)
        if cut is not None:
            self._stopped = True
            self._pending = ""
            return Push(self._release(pending[:cut]), True)
        keep = self._held_suffix(pending)
        self._pending = pending[len(pending) - keep :]
        return Push(self._release(pending[: len(pending) - keep]))

    def flush(self) -> str:
        """Release everything held back (an incomplete character decodes to U+FFFD).

        Returns "" after a stop. A held stop-string prefix is released as text: the stop
        string never completed, so it is ordinary output. Idempotent.
        """
        if self._stopped or self._closed:
            self._closed = True
            return ""
        self._closed = True
        pending = self._pending + self._decoder.decode(b"", final=True)
        self._pending = ""
        # The final decode can add U+FFFD only, which cannot complete a stop string unless
        # the stop string itself contains U+FFFD; check anyway so the contract holds.
        cut = self._find_stop(pending)
        if cut is not None:
            self._stopped = True
            pending = pending[:cut]
        return self._release(pending)

    def _release(self, text: str) -> str:
        if text:
            self._released.append(text)
        return text

    def _find_stop(self, text: str) -> int | None:
        """Start of the earliest complete stop string in `text`, or None."""
        best: int | None = None
        for stop in self._stops:
            # Only search where a match could start before the current best.
            end = len(text) if best is None else best + len(stop) - 1
            at = text.find(stop, 0, end)
            if at != -1 and (best is None or at < best):
                best = at
        return best

    def _held_suffix(self, text: str) -> int:
        """Length of the longest suffix of `text` that is a proper prefix of a stop string.

        Only suffixes shorter than the stop string matter (a complete one was already
        found); for each stop string, scan the few positions where its first character
        occurs within that reach, longest suffix first.
        """
        longest = 0
        for stop in self._stops:
            start = max(0, len(text) - (len(stop) - 1))
            first = stop[0]
            at = text.find(first, start)
            while at != -1 and len(text) - at > longest:
                if stop.startswith(text[at:]):
                    longest = len(text) - at
                    break
                at = text.find(first, at + 1)
        return longest

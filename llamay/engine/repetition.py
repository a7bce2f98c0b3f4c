"""An n-gram repetition penalty for constrained output (after DRY, "don't repeat yourself").

Small models loop inside constrained values: the same list item or phrase again and again
until max_tokens. When the text just generated repeats an earlier run of at least
`allowed_length` tokens, the token that continued that earlier run is penalised by
`multiplier * base ** (match_length - allowed_length)`: the longer the echo, the stronger
the push away from it. Only the last `window` tokens are searched. Structural tokens
(JSON punctuation and whitespace) are never penalised, so the format itself is free to
repeat, and a token the grammar forces is unaffected because nothing else is allowed.
Copying from the prompt is not an echo, as often as the prompt holds the copied text: a
continuation whose last few tokens occur in the prompt (an extracted date that shares its
year with an earlier one) is left alone until the output holds that run as often as the
prompt does; a second copy of a name the prompt names once is an echo like any other.

The JSON arrays the model has spent are `llamay.engine.siblings`; the grammar's mask as the
engine has it is `llamay.engine.packed_mask`.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidRequest
from .packed_mask import PackedMask
from .siblings import SIBLING_PENALTY, ArraySiblings

__all__ = ["NgramPenalty", "RepetitionParams", "structural_tokens"]

_STRUCTURAL = set(b'{}[],:" \t\r\n')


@dataclass(frozen=True)
class RepetitionParams:
    enabled: bool = True
    multiplier: float = 0.8
    base: float = 1.75
    allowed_length: int = 2
    window: int = 256

    def validate(self) -> RepetitionParams:
        if not 0.0 <= self.multiplier <= 10.0 or not 1.0 <= self.base <= 4.0:
            raise InvalidRequest(
                "'repetition.multiplier' must be 0..10 and 'repetition.base' 1..4", param="repetition"
            )
        if not 1 <= self.allowed_length <= 64 or not 8 <= self.window <= 8192:
            raise InvalidRequest(
                "'repetition.allowed_length' must be 1..64 and 'repetition.window' 8..8192",
                param="repetition",
            )
        return self


def structural_tokens(pieces: list[bytes]) -> np.ndarray:
    """A bool per token: its text is only JSON punctuation and whitespace (or empty)."""
    return np.array([all(b in _STRUCTURAL for b in p) for p in pieces], dtype=bool)


class NgramPenalty:
    """Per request. `penalize(logits, history)` returns logits with echoes pushed down
    (a new array; the input, llama.cpp's buffer, is never written). With `pieces` (every
    token's bytes) and `allowed` (the grammar's verdict on a token) it also keeps the
    request's `ArraySiblings` and applies them; `history` must then be the same list
    growing from call to call (the generated tokens)."""

    SOURCE_GRAM = 4  # a continuation is "copying" when its last 4 tokens occur in the prompt

    def __init__(
        self, params: RepetitionParams, structural: np.ndarray, source: list[int] | None = None
    ) -> None:
        self.params = params
        self.structural = structural
        self._structural = np.asarray(structural, dtype=np.uint8).tobytes()  # indexed per token: fast
        g = self.SOURCE_GRAM
        src = source or []
        self._source = Counter(tuple(src[i : i + g]) for i in range(len(src) - g + 1))
        self.siblings: ArraySiblings | None = None
        # Where each token occurs in the history, kept from call to call: the engine passes
        # the same growing history every step, so only the new tokens are indexed.
        self._history: list[int] = []
        self._at: defaultdict[int, list[int]] = defaultdict(list)  # token -> positions, ascending
        self._out: np.ndarray | None = None  # reused output buffer (see penalize)

    def penalties(self, history: list[int]) -> dict[int, float]:
        return self._penalties(history, growing=False)

    def _penalties(self, history: list[int], *, growing: bool) -> dict[int, float]:
        """`growing`: `history` is known to extend the last call's (see `_index`)."""
        p = self.params
        a = p.allowed_length
        end = len(history) - 1  # the last token's position
        start = max(0, len(history) - p.window)
        if end - start < a:
            return {}
        occurrences = self._index(history, start, growing)[history[end]]
        structural = self._structural
        found: dict[int, tuple[int, int]] = {}  # continuation -> (longest match, copies so far)
        # Only an earlier occurrence at j with start + a - 1 <= j < end + 1 - a can match
        # `a` tokens back without reaching the window's start or its own continuation.
        for j in occurrences[bisect_left(occurrences, start + a - 1) :]:
            if j > end - a:
                break
            nxt = history[j + 1]
            if structural[nxt]:  # punctuation may repeat: no need to measure the match
                continue
            length = 1  # history[j] is the last token
            while j - length >= start and history[j - length] == history[end - length] and length < end - j:
                length += 1
            if length >= a:
                best, copies = found.get(nxt, (0, 0))
                # A match of SOURCE_GRAM - 1 tokens continued by `nxt` is one earlier
                # output of the gram that continuing would write again.
                found[nxt] = (max(best, length), copies + (length >= self.SOURCE_GRAM - 1))
        out: dict[int, float] = {}
        g = self.SOURCE_GRAM
        gram_fits = end - start + 1 >= g - 1
        for nxt, (length, copies) in found.items():
            # Continuing with `nxt` copies the prompt, and the output has not yet copied
            # that run as often as the prompt holds it (the first copy is free, the Nth not).
            copying = gram_fits and copies < self._source.get((*history[end - g + 2 :], nxt), 0)
            if not copying:
                out[nxt] = p.multiplier * p.base ** (length - p.allowed_length)
        return out

    def _index(self, history: list[int], start: int, growing: bool) -> defaultdict[int, list[int]]:
        """Token -> its positions in `history` (ascending), complete from `start` on.

        When `history` extends the last one only the new tokens are indexed. Unless the
        caller says it does (`growing`), that is checked on the last window; the check
        reads every token of it, which costs as much as the rest of a step when the
        tokens' objects have left the CPU caches (as they have after a model decode)."""
        seen, known, at = len(self._history), self._history, self._at
        lo = max(0, seen - self.params.window)
        if len(history) >= seen and (growing or history[lo:seen] == known[lo:]):
            first = seen
            known.extend(history[seen:])
        else:
            first = start
            at = self._at = defaultdict(list)
            self._history = list(history)
        for i in range(first, len(history)):
            at[history[i]].append(i)
        return at

    def penalize(
        self,
        logits: np.ndarray,
        history: list[int],
        pieces: list[bytes] | None = None,
        allowed: np.ndarray | PackedMask | None = None,
        prefix: bytes = b"",
    ) -> np.ndarray:
        """`allowed`: the grammar's verdict per token (a bool array, or the packed mask as
        the engine has it, read bit by bit: unpacking a large vocabulary's mask every step
        would cost more than the rest of the penalty), needed with `pieces`. The first
        such call starts the JSON scan: `history` so far is text before the constraint
        began, skipped, and `prefix` is the constrained text it already holds (a trigger
        that is itself the start of the JSON). With them the n-gram search too takes
        `history` to extend the last call's.

        The result is `logits` itself when nothing is penalised, else a buffer this
        penalty reuses: valid until its next call."""
        pens = self._penalties(history, growing=pieces is not None and allowed is not None)
        pushed: list[int] = []
        if pieces is not None and allowed is not None:
            if self.siblings is None:
                self.siblings = ArraySiblings(pieces, start=len(history), prefix=prefix)
            siblings = self.siblings
            siblings.advance(history)
            if pens:
                siblings.note_echo(logits, pens, allowed)
            pushed = siblings.pushed(allowed)
        if not pens and not pushed:
            return logits
        out = self._buffer(logits)
        if pushed:
            if pens:  # summed first, as one penalty: a token in both gets one rounding
                for tok in pushed:
                    pens[tok] = pens.get(tok, 0.0) + SIBLING_PENALTY
            else:
                out[pushed] -= np.float32(SIBLING_PENALTY)
        if pens:
            ids = np.fromiter(pens.keys(), dtype=np.int64, count=len(pens))
            out[ids] -= np.fromiter(pens.values(), dtype=np.float32, count=len(pens))
        return out

    def _buffer(self, logits: np.ndarray) -> np.ndarray:
        """A float32 copy of `logits` in a buffer kept across calls: a fresh vocabulary-sized
        array every step costs page faults, which are slow in VMs."""
        out = self._out
        if out is None or out.shape != logits.shape:
            out = self._out = np.empty(logits.shape, dtype=np.float32)
        np.copyto(out, logits, casting="unsafe")
        return out

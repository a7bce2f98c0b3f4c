"""An n-gram repetition penalty for constrained output (after DRY, "don't repeat yourself").

Small models loop inside constrained values: the same list item or phrase again and again
until max_tokens. When the text just generated repeats an earlier run of at least
`allowed_length` tokens, the token that continued that earlier run is penalised by
`multiplier * base ** (match_length - allowed_length)`: the longer the echo, the stronger
the push away from it. Only the last `window` tokens are searched. Structural tokens
(JSON punctuation and whitespace) are never penalised, so the format itself is free to
repeat, and a token the grammar forces is unaffected because nothing else is allowed.
Copying from the prompt is not an echo: a continuation whose last few tokens also occur
in the prompt (an extracted date that shares its year with an earlier one) is left alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InvalidRequest

__all__ = ["RepetitionParams", "NgramPenalty", "structural_tokens"]

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
    (a new array; the input, llama.cpp's buffer, is never written)."""

    SOURCE_GRAM = 4  # a continuation is "copying" when its last 4 tokens occur in the prompt

    def __init__(
        self, params: RepetitionParams, structural: np.ndarray, source: list[int] | None = None
    ) -> None:
        self.params = params
        self.structural = structural
        g = self.SOURCE_GRAM
        src = source or []
        self._source = {tuple(src[i : i + g]) for i in range(len(src) - g + 1)}

    def penalties(self, history: list[int]) -> dict[int, float]:
        p = self.params
        h = history[-p.window :]
        n = len(h)
        if n <= p.allowed_length:
            return {}
        last = h[-1]
        out: dict[int, float] = {}
        arr = np.asarray(h[:-1])
        for pos in np.flatnonzero(arr == last):
            j = int(pos)
            length = 0
            while j - length >= 0 and h[j - length] == h[n - 1 - length] and length < n - 1 - j:
                length += 1
            nxt = h[j + 1]
            if length >= p.allowed_length and not self.structural[nxt] and not self._copying(h, nxt):
                pen = p.multiplier * p.base ** (length - p.allowed_length)
                if pen > out.get(nxt, 0.0):
                    out[nxt] = pen
        return out

    def _copying(self, h: list[int], nxt: int) -> bool:
        g = self.SOURCE_GRAM
        return len(h) >= g - 1 and (*h[len(h) - g + 1 :], nxt) in self._source

    def penalize(self, logits: np.ndarray, history: list[int]) -> np.ndarray:
        pens = self.penalties(history)
        if not pens:
            return logits
        out = np.array(logits, dtype=np.float32, copy=True)
        ids = np.fromiter(pens.keys(), dtype=np.int64)
        out[ids] -= np.fromiter(pens.values(), dtype=np.float32)
        return out

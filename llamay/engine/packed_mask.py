"""The grammar's verdict on tokens, as the engine has it: llguidance's packed mask (one bit
per token), read a token at a time without unpacking it, or a plain bool array. Unpacking a
large vocabulary's mask every step would cost more than the few tokens the penalties read."""

from __future__ import annotations

import numpy as np

__all__ = ["PackedMask", "allowed_at", "any_allowed", "several_allowed"]


class PackedMask:
    """llguidance's packed token mask (bit t%32 of word t//32 set: token t allowed), read
    one token at a time without unpacking it."""

    def __init__(self, words: np.ndarray, n_vocab: int) -> None:
        self.words = words.view(np.uint32)
        self.n = n_vocab
        self._ints: memoryview | None = None

    @property
    def ints(self) -> memoryview:
        """The words as Python ints, one at a time: far cheaper than numpy scalars for the
        handful of tokens read per step."""
        if self._ints is None:
            self._ints = np.ascontiguousarray(self.words).data.cast("B").cast("I")
        return self._ints

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, token: int) -> bool:
        return 0 <= token < self.n and bool((self.ints[token >> 5] >> (token & 31)) & 1)

    def any_of(self, ids: np.ndarray) -> bool:
        ids = ids[ids < self.n]
        return bool(np.any((self.words[ids >> 5] >> (ids & 31).astype(np.uint32)) & 1))

    def several(self) -> bool:
        """More than one token is allowed."""
        words = self.words[: (self.n + 31) // 32]
        count = int(np.count_nonzero(words))  # no index array: most masks allow many
        if count != 1:
            return count > 1
        w = int(words[np.flatnonzero(words)[0]])
        return w & (w - 1) != 0


def allowed_at(allowed: np.ndarray | PackedMask, ids: np.ndarray) -> np.ndarray:
    """One bool per id in `ids`: the grammar allows it."""
    if isinstance(allowed, PackedMask):
        inside = ids < allowed.n
        bits = (allowed.words[np.where(inside, ids, 0) >> 5] >> (ids & 31).astype(np.uint32)) & 1
        return inside & bits.astype(bool)
    inside = ids < len(allowed)
    return inside & allowed[np.where(inside, ids, 0)]


def any_allowed(allowed: np.ndarray | PackedMask, ids: np.ndarray) -> bool:
    """Whether the grammar allows any id in `ids`."""
    if isinstance(allowed, PackedMask):
        return allowed.any_of(ids)
    return bool(np.any(allowed[ids[ids < len(allowed)]]))


def several_allowed(allowed: np.ndarray | PackedMask) -> bool:
    """Whether the grammar allows more than one token."""
    return allowed.several() if isinstance(allowed, PackedMask) else int(np.count_nonzero(allowed)) > 1

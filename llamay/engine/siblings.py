"""The JSON sibling rule beside the n-gram penalty (`llamay.engine.repetition`).

A penalty alone turns a loop into invention: a small model that wants to repeat the last
list item, or call the same tool again, writes a new item instead when its echo is pushed
down, and goes on until max_tokens. So the moment the model's own first choice inside a
JSON array is an echo, that array is spent (`ArraySiblings`): from then on a token that
would start another element is pushed down by `SIBLING_PENALTY`, and the model ends the
element it is writing and closes the array. Both depend only on the sequence's own
history and prompt, so greedy output stays deterministic whatever shares the batch.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from .packed_mask import PackedMask, allowed_at, any_allowed, several_allowed

__all__ = ["SIBLING_PENALTY", "ArraySiblings"]


SIBLING_PENALTY = 12.0
"""Pushes down a token that would start another element of a spent array: far more than
the gap between `,` and `]` a small model leaves (1-3 logits), finite so that a grammar
that allows nothing else still has a token to choose."""


@dataclass
class _Scan:
    """Where a byte stream stands inside JSON: open containers ('[' or '{', with whether
    an array is spent) and whether it is inside a string. Text that is not JSON (a
    preamble, tags around tool calls) is skipped by the same rules, harmlessly: only
    arrays are acted on, and only while they are open."""

    stack: list[list[object]] = field(default_factory=list)  # [kind, spent, expecting a key]
    in_string: bool = False
    escaped: bool = False
    key: bool = False  # the open string is an object key

    def copy(self) -> _Scan:
        return _Scan([list(f) for f in self.stack], self.in_string, self.escaped, self.key)

    @property
    def in_value_string(self) -> bool:
        return self.in_string and not self.key

    def feed(self, data: bytes, watch: int | None = None) -> bool:
        """Consume `data`; True when a `,` lands directly in the container at stack depth
        `watch` (which must stay open until then)."""
        for b in data:
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif b == 0x5C:  # backslash
                    self.escaped = True
                elif b == 0x22:
                    self.in_string = False
            elif b == 0x22:
                self.in_string = True
                self.key = bool(self.stack) and self.stack[-1][0] == "{" and bool(self.stack[-1][2])
            elif b in (0x5B, 0x7B):  # [ {
                self.stack.append(["[" if b == 0x5B else "{", False, b == 0x7B])
            elif b in (0x5D, 0x7D):  # ] }
                if self.stack:
                    self.stack.pop()
                if watch is not None and len(self.stack) <= watch:
                    return False  # the watched array closed: not a new element
            elif b == 0x3A and self.stack:  # :
                self.stack[-1][2] = False
            elif b == 0x2C:
                if watch is not None and len(self.stack) == watch + 1:
                    return True
                if self.stack:
                    self.stack[-1][2] = self.stack[-1][0] == "{"
        return False

    def innermost_array(self) -> int | None:
        for depth in range(len(self.stack) - 1, -1, -1):
            if self.stack[depth][0] == "[":
                return depth
        return None


_SCAN_BYTES = b'"\\[]{}:,'  # every byte _Scan.feed acts on


class _Vocab:
    """What the sibling rule derives from one vocabulary, kept across requests: which
    tokens hold a `,`, and (memoised per parser state) which of them would open another
    element of an array. Parser states repeat across requests as much as within one."""

    MAX_STATES = 256

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces  # held so that id(pieces) stays unique while cached
        self.commas = np.flatnonzero(np.array([b"," in p for p in pieces], dtype=bool))
        # Tokens without a byte the scan reacts to cannot move it (unless a backslash in a
        # string went before), so the openers found for the state before them stand.
        self.inert = bytes(len(p.translate(None, _SCAN_BYTES)) == len(p) for p in pieces)
        self.openers: dict[tuple[object, ...], _Openers] = {}
        self.lock = threading.Lock()


_vocabs: dict[int, _Vocab] = {}
_vocabs_lock = threading.Lock()


def _vocab(pieces: list[bytes]) -> _Vocab:
    """The per-vocabulary tables of `pieces` (a model's token texts), built once."""
    with _vocabs_lock:
        hit = _vocabs.get(id(pieces))
        if hit is None or hit.pieces is not pieces:
            if len(_vocabs) >= 8:
                _vocabs.clear()
            hit = _vocabs[id(pieces)] = _Vocab(pieces)
        return hit


class ArraySiblings:
    """Per request: which JSON arrays of the output are spent (the model's first choice
    inside one was an echo) and which tokens would open another element of one.

    `advance(history)` feeds the tokens generated since the last call; `note_echo` marks
    the innermost open array spent when the best allowed raw logit belongs to a token the
    n-gram penalty pushes down; `penalties` adds SIBLING_PENALTY for every allowed token
    that would put a `,` directly into a spent array (from the current state: `",` ends a
    string element and starts another, `},` ends a tool call and starts another)."""

    def __init__(self, pieces: list[bytes], start: int = 0, prefix: bytes = b"") -> None:
        self.pieces = pieces
        self.scan = _Scan()
        self.scan.feed(prefix)
        self.seen = start
        self._vocab = _vocab(pieces)
        self._last: tuple[int, _Openers] | None = None  # (depth, openers) while the scan holds still

    def advance(self, history: list[int]) -> None:
        inert = self._vocab.inert
        for t in history[self.seen :]:
            if self.scan.escaped or not inert[t]:
                self._last = None  # the scan may move: the openers are looked up again
            self.scan.feed(self.pieces[t])
        self.seen = len(history)

    def may_note_echo(self) -> bool:
        """Inside a value string of an array not yet spent: where `note_echo` can act."""
        depth = self.scan.innermost_array()
        return depth is not None and not self.scan.stack[depth][1] and self.scan.in_value_string

    def note_echo(self, logits: np.ndarray, pens: dict[int, float], allowed: np.ndarray | PackedMask) -> None:
        # Only inside a value string: keys and punctuation repeat by design, numbers
        # share digits, and a token the grammar forces is no choice of the model's.
        depth = self.scan.innermost_array()
        if depth is None or not self.may_note_echo():
            return
        echoes = [t for t in pens if allowed[t]]
        if not echoes or not several_allowed(allowed):
            return
        best_echo = max(float(logits[t]) for t in echoes)
        # The echo is the model's first choice when no allowed token scores above it.
        # Most often the vocabulary's best token settles it: the echo itself, or another
        # allowed token; only otherwise are all the tokens above the echo looked up.
        view = logits[: len(allowed)]
        top = int(np.argmax(view))
        if view[top] <= best_echo:
            above = False
        elif allowed[top]:
            above = True
        else:
            above = any_allowed(allowed, np.flatnonzero(view > best_echo))
        if not above:
            self.scan.stack[depth][1] = True

    def spent_depth(self) -> int | None:
        """The depth of the innermost open array, when it is spent."""
        depth = self.scan.innermost_array()
        return depth if depth is not None and self.scan.stack[depth][1] else None

    def penalties(self, pens: dict[int, float], allowed: np.ndarray | PackedMask) -> dict[int, float]:
        pushed = self.pushed(allowed)
        if not pushed:
            return pens
        out = dict(pens)
        for tok in pushed:
            out[tok] = out.get(tok, 0.0) + SIBLING_PENALTY
        return out

    def pushed(self, allowed: np.ndarray | PackedMask) -> list[int]:
        """The allowed tokens that `penalties` pushes down by SIBLING_PENALTY (ascending)."""
        depth = self.spent_depth()
        if depth is None:
            return []
        return self._openers(depth).allowed(allowed)

    def _openers(self, depth: int) -> _Openers:
        """Tokens that would put a `,` directly into the array at `depth` from the scan's
        state. Whether one does depends only on the state from that array up (the kinds
        and key flags of the containers above it, and the string flags), which repeats
        from step to step: memoised on it, so the vocabulary is scanned once per state."""
        if self._last is not None and self._last[0] == depth:
            return self._last[1]
        scan = self.scan
        key = (scan.in_string, scan.escaped, scan.key, tuple((f[0], f[2]) for f in scan.stack[depth:]))
        vocab = self._vocab
        hit = vocab.openers.get(key)  # a dict read is atomic; the lock guards the insert below
        if hit is None:
            top = _Scan([list(f) for f in scan.stack[depth:]], scan.in_string, scan.escaped, scan.key)
            ids = [t for t in vocab.commas.tolist() if top.copy().feed(self.pieces[t], watch=0)]
            hit = _Openers(np.array(ids, dtype=np.int64))
            with vocab.lock:
                if len(vocab.openers) < vocab.MAX_STATES:
                    vocab.openers[key] = hit
        self._last = (depth, hit)
        return hit


class _Openers:
    """Token ids (ascending), each with its packed-mask word and bit, so that which of them
    a mask allows is read without a numpy call per token."""

    def __init__(self, ids: np.ndarray) -> None:
        self.ids = ids
        self.bits = [(t, t >> 5, 1 << (t & 31)) for t in ids.tolist()]

    def allowed(self, allowed: np.ndarray | PackedMask) -> list[int]:
        """The ids the grammar allows."""
        if not isinstance(allowed, PackedMask) or (self.bits and self.bits[-1][0] >= allowed.n):
            return self.ids[allowed_at(allowed, self.ids)].tolist()
        words = allowed.ints
        return [t for t, word, bit in self.bits if words[word] & bit]

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
from bisect import bisect_left
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import numpy as np

from ..errors import InvalidRequest

__all__ = ["RepetitionParams", "NgramPenalty", "ArraySiblings", "PackedMask", "SIBLING_PENALTY", "structural_tokens"]

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


def _allowed_at(allowed: np.ndarray | PackedMask, ids: np.ndarray) -> np.ndarray:
    """One bool per id in `ids`: the grammar allows it."""
    if isinstance(allowed, PackedMask):
        inside = ids < allowed.n
        bits = (allowed.words[np.where(inside, ids, 0) >> 5] >> (ids & 31).astype(np.uint32)) & 1
        return inside & bits.astype(bool)
    inside = ids < len(allowed)
    return inside & allowed[np.where(inside, ids, 0)]


def _any_of(allowed: np.ndarray | PackedMask, ids: np.ndarray) -> bool:
    if isinstance(allowed, PackedMask):
        return allowed.any_of(ids)
    return bool(np.any(allowed[ids[ids < len(allowed)]]))


def _several(allowed: np.ndarray | PackedMask) -> bool:
    return allowed.several() if isinstance(allowed, PackedMask) else int(np.count_nonzero(allowed)) > 1


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
        if not echoes or not _several(allowed):
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
            above = _any_of(allowed, np.flatnonzero(view > best_echo))
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
            return self.ids[_allowed_at(allowed, self.ids)].tolist()
        words = allowed.ints
        return [t for t, word, bit in self.bits if words[word] & bit]

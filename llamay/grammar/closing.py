"""The shortest way to finish: from a matcher's state, a short run of tokens that the
grammar accepts as a complete answer.

Used when a constrained answer's `max_tokens` runs low (the engine steers to it, see
`engine/sampling_step.py`) and before a request runs (a `max_tokens` below the shortest
answer from the start is refused). The search is greedy over the grammar's own mask, in a
fixed order of preference: what the grammar forces; then closers (`"}`, `]`, ...), so no
string, array or object stays open longer than it must; then the shortest values (`0`,
`""`, `[]`, `{}`, `null`, ...); and only then the lowest-numbered token the mask allows
(for a key or a pattern nothing shorter fits; inside a string no closer may end yet, a short
text matching one of the grammar's patterns is tried first, examples.py). Any JSON object is closed before a new
optional key or item can open. Every token it picks comes from the mask, so whatever it
returns is a valid continuation; it is a short completion, not provably the shortest.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import llguidance
import numpy as np

from .layout import Indented
from .runtime import mask_tokens

__all__ = ["ClosingTokens", "JsonScan", "closing_tokens", "shortest_completion", "PREFERRED"]

# Texts tried in this order at every step, by where the text stands: inside a string,
# close it (closing the container too when one token does both); outside, close containers
# first (longest first, so one token closes several levels), then the separators that
# lead to a required key or item (never allowed where a value is due, so they cannot cut
# one short), then the shortest values of each JSON type, then openers.
IN_STRING: tuple[str, ...] = ('"}}', '"}]', '"]}', '"}', '"]', '"')
OUTSIDE: tuple[str, ...] = (
    "}}", "}]", "]}", "]]", "}", "]", ")",
    ', "', ',"', ",", ": ", ":",
    '""', "[]", "{}", "0", "null", "false", "true",
    '"', "[", "{",
)  # fmt: skip
PREFERRED = IN_STRING + OUTSIDE
QUOTED = 64  # tokens starting with a quote tried after IN_STRING


@dataclass(frozen=True)
class ClosingTokens:
    """One tokenizer's token ids for `IN_STRING` and `OUTSIDE` (texts it has no single
    token for are skipped) with their bytes, its end-of-text tokens, and its vocabulary size."""

    in_string: tuple[int, ...]
    outside: tuple[int, ...]
    pieces: dict[int, bytes]
    eos: frozenset[int]
    vocab_size: int
    tokenizer: llguidance.LLTokenizer
    gaps: dict[bytes, list[int]] = field(default_factory=dict)  # whitespace runs as tokens

    def piece(self, token: int) -> bytes:
        found = self.pieces.get(token)
        return found if found is not None else self.tokenizer.decode_bytes([token])

    def gap_tokens(self, gap: bytes) -> list[int]:
        found = self.gaps.get(gap)
        if found is None:
            found = self.gaps[gap] = list(self.tokenizer.tokenize_bytes(gap))
        return found


def closing_tokens(tokenizer: llguidance.LLTokenizer) -> ClosingTokens:
    """The preferred tokens of `tokenizer` (a few tokenizations; cache the result)."""
    pieces: dict[int, bytes] = {}

    def ids(texts: tuple[str, ...]) -> tuple[int, ...]:
        out: list[int] = []
        for text in texts:
            toks = tokenizer.tokenize_str(text)
            if len(toks) == 1 and toks[0] not in out and tokenizer.decode_bytes(toks) == text.encode():
                out.append(toks[0])
                pieces[toks[0]] = text.encode()
        return tuple(out)

    preferred = ids(IN_STRING)
    # A vocabulary without a lone `"` still closes strings with `",`, `":` and the like:
    # every token that starts with a quote, shortest first, after the preferred ones.
    quoted = []
    for t in range(tokenizer.vocab_size):
        if not tokenizer.is_special_token(t):
            piece = tokenizer.decode_bytes([t])
            if piece.startswith(b'"') and t not in preferred:
                quoted.append((len(piece), t))
    in_string = preferred + tuple(t for _, t in sorted(quoted)[:QUOTED])
    return ClosingTokens(
        in_string, ids(OUTSIDE), pieces, frozenset(tokenizer.eos_tokens), tokenizer.vocab_size, tokenizer
    )


class JsonScan:
    """Where JSON text stands, byte by byte: inside a string (and after a backslash) or
    not. Cheap to copy. For a grammar that is not JSON it only orders preferences."""

    __slots__ = ("in_string", "escaped")

    def __init__(self, in_string: bool = False, escaped: bool = False) -> None:
        self.in_string = in_string
        self.escaped = escaped

    def copy(self) -> JsonScan:
        return JsonScan(self.in_string, self.escaped)

    def feed(self, data: bytes) -> None:
        for b in data:
            if self.escaped:
                self.escaped = False
            elif self.in_string and b == 0x5C:  # backslash
                self.escaped = True
            elif b == 0x22:  # quote
                self.in_string = not self.in_string


def shortest_completion(
    matcher: llguidance.LLMatcher,
    closing: ClosingTokens,
    limit: int,
    *,
    first: int | None = None,
    scan: JsonScan | Indented | None = None,
    examples: tuple[tuple[int, ...], ...] = (),
) -> list[int] | None:
    """Tokens that take `matcher`'s state (after `first`, when given) to an accepting one,
    at most `limit` of them (not counting `first`); [] if it accepts already; None if none
    was found within `limit` or the state is in error. `scan` is where the text so far
    stands (None: at the start). Neither `matcher` nor `scan` is advanced.

    Greedy passes, each only when the one before finds nothing: by JSON preference; the
    same, writing `examples` (tokens of texts matching the grammar's patterns) where a
    string may not close yet; by the lowest token the mask allows (a grammar that is not
    JSON)."""
    found = _greedy(matcher, closing, limit, first, scan, prefer=True)
    if found is None and examples:
        # A string that no closer may end yet: a pattern wants some text first.
        found = _greedy(matcher, closing, limit, first, scan, prefer=True, examples=examples)
    if found is None:
        found = _greedy(matcher, closing, limit, first, scan, prefer=False)
    return found


def _greedy(
    matcher: llguidance.LLMatcher,
    closing: ClosingTokens,
    limit: int,
    first: int | None,
    scan: JsonScan | Indented | None,
    *,
    prefer: bool,
    examples: tuple[tuple[int, ...], ...] = (),
) -> list[int] | None:
    m = matcher.deep_copy()
    scan = scan.copy() if scan is not None else JsonScan()
    if first is not None:
        if not m.consume_token(first):
            return None
        scan.feed(closing.piece(first))
    out: list[int] = []
    mask: np.ndarray | None = None
    while not m.is_accepting():
        if m.is_error() or m.is_stopped() or len(out) >= limit:
            return None
        forced = m.compute_ff_tokens()
        if forced:
            taken = m.try_consume_tokens(forced)
            if taken == 0:
                return None
            run = forced[:taken]
        else:
            found = (
                _preferred(m, closing.in_string if scan.in_string else closing.outside, scan, closing)
                if prefer
                else None
            )
            if found is None and scan.in_string and examples:
                found = _example(m, examples, closing)
            if found is None:
                if mask is None:
                    mask = np.zeros((closing.vocab_size + 31) // 32, dtype=np.int32)
                found = _lowest_allowed(m, mask, scan, closing)
                if found is None:
                    return None
            run = found
        for t in run:
            scan.feed(closing.piece(t))
        out.extend(run)
    return out if len(out) <= limit else None


def _take(
    m: llguidance.LLMatcher, token: int, scan: JsonScan | Indented, closing: ClosingTokens
) -> list[int] | None:
    """`token` (after the whitespace the layout wants before it, if any) consumed by `m`,
    or None (nothing consumed) when the grammar or the layout refuses it."""
    run = [token]
    if isinstance(scan, Indented):
        piece = closing.piece(token)
        if not scan.accepts(piece):
            if scan.in_string or not piece or piece[0] in b" \t\n\r":
                return None
            gap = scan.gap(piece[0])
            if not gap or not scan.accepts(gap + piece):
                return None
            run = [*closing.gap_tokens(gap), token]
    taken = m.try_consume_tokens(run)
    if taken == len(run):
        return run
    if taken:
        m.rollback(taken)
    return None


def _preferred(
    m: llguidance.LLMatcher, tokens: tuple[int, ...], scan: JsonScan | Indented, closing: ClosingTokens
) -> list[int] | None:
    """The first of `tokens` the grammar and layout take (consumed, with any whitespace
    before it), else None."""
    for token in tokens:
        run = _take(m, token, scan, closing)
        if run is not None:
            return run
    return None


def _example(
    m: llguidance.LLMatcher, examples: tuple[tuple[int, ...], ...], closing: ClosingTokens
) -> list[int] | None:
    """Inside a string no closer is allowed yet (a pattern wants text first): the first of
    `examples` (texts matching the grammar's patterns, shortest first) that the grammar
    takes whole and after which the string may close, consumed; else None."""
    for run in examples:
        if not run:
            continue
        taken = m.try_consume_tokens(list(run))
        if taken == len(run) and any(m.validate_tokens([q]) == 1 for q in closing.in_string):
            return list(run)
        if taken:
            m.rollback(taken)
    return None


# Allowed tokens looked at, lowest first, for one that also keeps the layout.
_FALLBACK_TRIES = 512


def _lowest_allowed(
    m: llguidance.LLMatcher, mask: np.ndarray, scan: JsonScan | Indented, closing: ClosingTokens
) -> list[int] | None:
    m.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)
    for token in mask_tokens(mask, closing.vocab_size)[:_FALLBACK_TRIES]:
        if int(token) not in closing.eos:
            run = _take(m, int(token), scan, closing)
            if run is not None:
                return run
    return None

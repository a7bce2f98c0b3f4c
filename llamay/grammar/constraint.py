"""The per-request constraint the engine applies while sampling, and the compile cache
(one per tokenizer, held by the tokenizer's owner).

Flow per decoding step (see `Constraint`): `fill_mask` -> apply the bitmask to the logits
-> sample -> `consume`. A token the mask forbids can never be sampled, so the output
satisfies the grammar by construction; nothing is checked afterwards.
"""

from __future__ import annotations

import functools
import hashlib
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import llguidance
import numpy as np

from ..errors import GrammarError
from .closing import ClosingTokens, JsonScan, closing_tokens, shortest_completion
from .examples import pattern_examples
from .layout import Indented
from .runtime import byte_tokenizer, forbid, mask_tokens, matcher_error, parser_limits

if TYPE_CHECKING:
    from .grammar import Grammar

__all__ = ["Compiled", "CompileCache", "Constraint", "allocate_mask", "byte_compile_cache", "CACHE_SIZE"]

CACHE_SIZE = 256  # compiled grammars kept (least recently used dropped first)


@dataclass(frozen=True, eq=False)
class Compiled:
    """A grammar compiled for one tokenizer. The template matcher is never advanced;
    each request gets its own copy from `matcher()`."""

    spec_hash: str
    template: llguidance.LLMatcher
    compile_seconds: float
    # Tokens of short strings matching the grammar's string patterns (see examples.py).
    examples: tuple[tuple[int, ...], ...] = ()

    def matcher(self) -> llguidance.LLMatcher:
        """A fresh matcher at the start of the grammar (cheap: shares compiled state)."""
        return self.template.deep_copy()


def spec_hash(spec: str) -> str:
    return hashlib.sha256(spec.encode()).hexdigest()


class CompileCache:
    """Grammars compiled for one tokenizer, owned by whoever owns that tokenizer (a
    `Model` for its vocabulary; `byte_compile_cache` for the byte tokenizer), so it lives
    and dies with it.

    An LRU of `size` entries keyed by the sha256 of the llguidance spec. Thread-safe, and
    concurrent requests for the same grammar compile once. llguidance drops the GIL while
    compiling, so other threads keep running.
    """

    def __init__(self, tokenizer: llguidance.LLTokenizer, size: int = CACHE_SIZE) -> None:
        self.tokenizer = tokenizer
        self.size = size
        self._entries: OrderedDict[str, Compiled] = OrderedDict()
        self._lock = threading.Lock()
        self._inflight: dict[str, threading.Lock] = {}
        self._closing: ClosingTokens | None = None

    @property
    def closing(self) -> ClosingTokens:
        """The tokenizer's tokens for the shortest completions (see `closing.py`)."""
        if self._closing is None:
            self._closing = closing_tokens(self.tokenizer)
        return self._closing

    def min_tokens(self, grammar: Grammar, limit: int) -> int | None:
        """Tokens of the shortest answer `grammar` allows that the search finds (None: more
        than `limit`, or none found). Compiles `grammar` on a miss."""
        compiled = self.get(grammar)
        found = shortest_completion(
            compiled.template, self.closing, limit, scan=new_scan(grammar), examples=compiled.examples
        )
        return None if found is None else len(found)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def get(self, grammar: Grammar) -> Compiled:
        """`grammar` compiled for this cache's tokenizer, compiling it on a miss. Raises
        GrammarError if it does not compile for this vocabulary (e.g. it names a special
        token the model lacks, or hits a limit)."""
        key = grammar.spec_hash
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
                return hit
            key_lock = self._inflight.setdefault(key, threading.Lock())
        with key_lock:
            with self._lock:
                hit = self._entries.get(key)
            if hit is not None:
                return hit
            try:
                compiled = _compile(grammar, self.tokenizer)
            finally:
                with self._lock:
                    self._inflight.pop(key, None)
            with self._lock:
                self._entries[key] = compiled
                while len(self._entries) > self.size:
                    self._entries.popitem(last=False)
            return compiled


@functools.cache
def byte_compile_cache() -> CompileCache:
    """The compile cache of `byte_tokenizer()`, for model-free matching. Like the
    tokenizer it belongs to, one per process."""
    return CompileCache(byte_tokenizer())


def _compile(grammar: Grammar, tokenizer: llguidance.LLTokenizer) -> Compiled:
    start = time.perf_counter()
    matcher = llguidance.LLMatcher(tokenizer, grammar.spec, log_level=0, limits=parser_limits())
    elapsed = time.perf_counter() - start
    error = matcher_error(matcher)
    if error is not None:
        raise GrammarError(f"grammar does not compile for this model: {error.strip()}", param=grammar.param)
    examples = tuple(tuple(tokenizer.tokenize_bytes(e)) for e in pattern_examples(grammar.lark))
    return Compiled(grammar.spec_hash, matcher, elapsed, examples)


def new_scan(grammar: Grammar) -> JsonScan | Indented:
    """What follows a text of `grammar` for its shortest endings: its canonical layout when
    it is JSON in the indented layout, else only where strings are."""
    return Indented() if grammar.layout == "indented" else JsonScan()


def allocate_mask(tokenizer: llguidance.LLTokenizer) -> np.ndarray:
    """A zeroed int32 bitmask with one bit per token of `tokenizer` (bit t%32 of word
    t//32 set = token t allowed), the shape `Constraint.fill_mask` fills."""
    return np.zeros((tokenizer.vocab_size + 31) // 32, dtype=np.int32)


class Constraint:
    """One request's matcher over a model's LLTokenizer, compiled through that
    tokenizer's `CompileCache` (`Model.compile_cache`).

    Not thread-safe: one request, one thread at a time. Never raises for anything the
    model generates; a rejected token puts it in an error state (`error` set, `consume`
    returns False) and the engine should end the request with an error finish reason.
    """

    def __init__(self, grammar: Grammar, cache: CompileCache) -> None:
        """Raises GrammarError if `grammar` does not compile for the cache's tokenizer."""
        tokenizer = cache.tokenizer
        self.grammar = grammar
        self.vocab_size = tokenizer.vocab_size
        self.eos_tokens = list(tokenizer.eos_tokens)
        self._n_words = (self.vocab_size + 31) // 32
        compiled = cache.get(grammar)
        self._matcher = compiled.matcher()
        self._examples = compiled.examples
        self._error: str | None = None
        self._closing = cache.closing
        # Where the text consumed so far stands, for `completion` and, for the indented
        # layout, for `keeps_layout`.
        self._scan = new_scan(grammar)
        # A valid ending from the current state, kept so the next one is usually checked
        # rather than searched for (`ending_after`); None when not known. `_pending` is the
        # ending `ending_after` found after a token not yet consumed.
        self._known: list[int] | None = None
        self._pending: tuple[int, list[int]] | None = None

    @property
    def error(self) -> str | None:
        """Why the constraint failed (a rejected token, a per-step limit), else None."""
        return self._error or matcher_error(self._matcher)

    def fill_mask(self, out: np.ndarray) -> None:
        """Write the allowed next tokens into `out` (from `allocate_mask`). EOS tokens are
        allowed exactly when `is_accepting()`. Logits beyond the tokenizer's vocab_size
        (some models pad their output layer) are not covered: mask them out too. In an
        error state llguidance allows only EOS."""
        if out.dtype != np.int32 or out.shape != (self._n_words,) or not out.flags["C_CONTIGUOUS"]:
            raise ValueError(f"mask must be a contiguous int32 array of shape ({self._n_words},)")
        self._matcher.unsafe_compute_mask_ptr(out.ctypes.data, out.nbytes)

    def consume(self, token: int) -> bool:
        """Advance past the sampled `token`; False (and `error` set) if the grammar
        rejects it. Consuming an EOS token while accepting succeeds and stops the matcher."""
        if self._error is not None:
            return False
        if not 0 <= token < self.vocab_size:
            self._error = f"token {token} is outside the vocabulary of {self.vocab_size}"
            return False
        if self._matcher.consume_token(token):
            self._scan.feed(self._closing.piece(token))
            self._follow(token)
            return True
        self._error = matcher_error(self._matcher) or f"token {token} rejected by the grammar"
        return False

    def is_accepting(self) -> bool:
        """The text so far is complete under the grammar (EOS is allowed here)."""
        return self._error is None and self._matcher.is_accepting()

    def is_stopped(self) -> bool:
        """Nothing but EOS may follow (grammar finished, or error): stop generating."""
        return self._error is not None or self._matcher.is_stopped()

    def forced_tokens(self) -> list[int]:
        """Tokens the grammar forces next, which the engine may append without sampling
        (feeding each to `consume`, and to the model as usual). Often empty."""
        if self.is_stopped():
            return []
        return list(self._matcher.compute_ff_tokens())

    def keeps_layout(self, token: int) -> bool:
        """Whether `token` keeps the canonical layout (always, unless the grammar is JSON
        in the indented layout: see layout.py). The grammar's mask is checked apart, but
        whitespace after a value is the gap before a closer, so it keeps the layout only
        where the grammar lets the container close (else it leads nowhere)."""
        scan = self._scan
        if not isinstance(scan, Indented):
            return True
        after = scan.copy()
        if not after.feed(self._closing.piece(token)):
            return False
        rest = after.pending_close()
        if rest is None:
            return True
        tokens = [token, *self._closing.gap_tokens(rest)]
        return bool(self._matcher.validate_tokens(tokens) == len(tokens))

    def respaced(self, token: int) -> list[int] | None:
        """Tokens that write what `token` writes with the layout's whitespace instead of its
        own (`Indented.respace`), when the grammar accepts them all and they differ from
        `token` alone; else None. A model whose vocabulary joins a quote to a bracket can
        so say what it chose in the layout. Advances nothing."""
        scan = self._scan
        if not isinstance(scan, Indented):
            return None
        text = scan.respace(self._closing.piece(token))
        if text is None:
            return None
        tokens = list(self._closing.tokenizer.tokenize_bytes(text))
        if tokens == [token] or self._closing.tokenizer.decode_bytes(tokens) != text:
            return None
        if self._matcher.validate_tokens(tokens) != len(tokens):
            return None
        return tokens

    def keep_layout(self, mask: np.ndarray) -> int:
        """Clear from `mask` (as `fill_mask` wrote it) every allowed token that would leave
        the canonical layout, and return how many stay allowed. A no-op (the popcount)
        unless the grammar is JSON in the indented layout. Costs one check per allowed
        token: for when sampling again (`keeps_layout`) has not found one cheaply."""
        allowed = mask_tokens(mask, self.vocab_size)
        if not isinstance(self._scan, Indented):
            return int(allowed.size)
        kept = 0
        for t in allowed.tolist():
            if self.keeps_layout(t):
                kept += 1
            else:
                forbid(mask, t)
        return kept

    def completion(self, limit: int, first: int | None = None) -> list[int] | None:
        """A shortest completion from here (after `first`, when given) of at most `limit`
        tokens, or None (see `closing.shortest_completion`). Advances nothing, but the
        constraint keeps what it finds for `ending` and `ending_after`."""
        if self._error is not None:
            return None
        found = shortest_completion(
            self._matcher, self._closing, limit, first=first, scan=self._scan, examples=self._examples
        )
        if found is not None:
            if first is None:
                self._known = found
            else:
                self._pending = (first, found)
        return found

    def ending(self, limit: int) -> list[int] | None:
        """A valid ending from here of at most `limit` tokens: the one kept from an earlier
        search when it fits, else `completion(limit)`. Advances nothing."""
        if self._error is not None:
            return None
        known = self._known
        if known is not None and len(known) <= limit:
            return list(known)
        return self.completion(limit)

    def ending_after(self, token: int, limit: int) -> list[int] | None:
        """A valid ending of at most `limit` tokens after `token` (not yet consumed), or
        None when none is found (see `completion`). Advances nothing.

        Most tokens leave the text of the last ending valid, so that is tried first
        (`_reuse`) and checked: one pass of the matcher over it, and of the layout over its
        bytes. A search runs only when that fails or is too long."""
        if self._error is not None:
            return None
        known = self._known
        if known is not None:
            if known and known[0] == token:
                after: list[int] | None = known[1:]  # the ending's own path: valid as it is
            else:
                after = self._reuse(token, known)
                if after is not None and not self._still_ends(token, after):
                    after = None
            if after is not None and len(after) <= limit:
                self._pending = (token, after)
                return list(after)
        return self.completion(limit, first=token)

    def _reuse(self, token: int, known: list[int]) -> list[int] | None:
        """What is left of `known`'s text after `token`, as tokens, when it is likely still
        an ending: `token` writes a start of that text (a piece of whitespace, an opening
        quote), or writes the same up to a point inside a string and then only plain string
        text, which the ending's closing quote still closes. Else None. Not checked here."""
        piece = self._closing.piece
        mine = piece(token)
        text = b"".join(piece(t) for t in known)
        same = 0
        for a, b in zip(mine, text, strict=False):
            if a != b:
                break
            same += 1
        if same < len(mine):  # the token goes its own way after `same` bytes
            if b'"' in mine[same:] or b"\\" in mine[same:]:
                return None
            scan = self._scan.copy()
            scan.feed(mine[:same])
            if not scan.in_string or scan.escaped:
                return None
        if same == 0:
            return known
        return list(self._closing.tokenizer.tokenize_bytes(text[same:]))

    def _still_ends(self, token: int, ending: list[int]) -> bool:
        """Whether `ending` is still a valid ending after `token`: the grammar takes both
        and then accepts (an end-of-text token is taken), and the layout keeps the bytes."""
        if not self.eos_tokens:
            return False
        run = [token, *ending, self.eos_tokens[0]]
        if self._matcher.validate_tokens(run) != len(run):
            return False
        scan = self._scan
        if not isinstance(scan, Indented):
            return True
        after = scan.copy()
        piece = self._closing.piece
        after.feed(piece(token))  # the token was judged apart (sampling_step._in_layout)
        return after.feed(b"".join(piece(t) for t in ending))

    def _follow(self, token: int) -> None:
        """Keep the known ending in step with the consumed `token`."""
        pending, self._pending = self._pending, None
        known = self._known
        if pending is not None and pending[0] == token:
            self._known = pending[1]
        elif known and known[0] == token:
            self._known = known[1:]
        else:
            self._known = None

    def rollback(self, n_tokens: int) -> bool:
        """Undo the last `n_tokens` consumed tokens (for speculative decoding). The text's
        scan for `completion` and `keeps_layout` is not undone: steer nothing after this."""
        self._known = self._pending = None
        return self._error is None and self._matcher.rollback(n_tokens)

"""Differential testing of the JSON schema compiler: helpers shared by the test files.

`write(grammar, value)` finds a text denoting `value` that the grammar matches in full, or
None. A generator legitimately emits a subset of the texts denoting a value, so the
question "does the grammar reject this valid value?" is asked of every spelling the
compiler chooses between: object keys in any order (llguidance writes declared
properties in schema order), integral numbers with or without a fraction or exponent,
and strings written the one way the grammar writes them (raw UTF-8, only the short
escapes). The search is driven by the grammar itself: each piece is offered to a byte
matcher, which is rolled back when the piece leads nowhere.

`check_schema` generates values for one schema (.schema_gen) and holds the grammar to
the reference validator's answers (.schema_reference).
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import llguidance
import numpy as np
import referencing.exceptions

from llamay.errors import GrammarError
from llamay.grammar import Grammar, byte_compile_cache, byte_tokenizer
from llamay.grammar.runtime import parser_limits
from llamay.grammar.validate import validate

from .schema_reference import Unverifiable, ecma_search, reference

__all__ = [
    "write",
    "reference",
    "writable",
    "Budget",
    "check_schema",
    "Outcome",
    "ecma_search",
    "walk_masked",
]


class Budget(Exception):
    """The search for a matching spelling ran out of steps (undecided)."""


class _Writer:
    """Continuation-passing search: each `put_*` writes one piece in each way it can and
    calls `then()` after each; on failure it rolls the matcher back to where it was.

    With `prune`, a member whose value the grammar refuses right after its key is taken
    to be refused in any position, so the object fails at once (exact for everything
    but objects whose members' schemas depend on the order of other members); the
    callers confirm an unexpected answer with an exhaustive search."""

    def __init__(self, grammar: Grammar, steps: int, prune: bool, order: dict[str, int]) -> None:
        self.matcher = _matcher(grammar)
        self.order = order
        self.steps = steps
        self.prune = prune
        self.pos = 0
        self.text = bytearray()

    def push(self, data: bytes) -> bool:
        self.steps -= 1
        if self.steps < 0:
            raise Budget
        done = self.matcher.try_consume_tokens(list(data))
        if done == len(data):
            self.pos += done
            self.text += data
            return True
        if done:
            self.matcher.rollback(done)
        return False

    def back_to(self, pos: int) -> None:
        if self.pos > pos:
            self.matcher.rollback(self.pos - pos)
            self.pos = pos
            del self.text[pos:]

    def piece(self, data: bytes, then: Callable[[], bool]) -> bool:
        start = self.pos
        if not self.push(data):
            return False
        if then():
            return True
        self.back_to(start)
        return False

    def put(self, v: Any, then: Callable[[], bool]) -> bool:
        if isinstance(v, dict):
            keys = sorted(v, key=lambda k: self.order.get(k, len(self.order)))
            return self.piece(b"{", lambda: self.members(v, keys, True, set(), then))
        if isinstance(v, list):
            return self.piece(b"[", lambda: self.items(v, 0, then))
        return any(self.piece(text, then) for text in spellings(v))

    def items(self, items: list[Any], i: int, then: Callable[[], bool]) -> bool:
        if i == len(items):
            return self.piece(b"]", then)

        def rest() -> bool:
            return self.items(items, i + 1, then)

        if i == 0:
            return self.put(items[0], rest)
        return self.piece(b",", lambda: self.put(items[i], rest))

    def members(
        self, members: dict[str, Any], keys: list[str], first: bool, dead: set[str], then: Callable[[], bool]
    ) -> bool:
        """The remaining `keys` in any order the grammar takes, then the closing brace."""
        if not keys:
            return self.piece(b"}", then)
        for key in keys:
            if key in dead:
                return False
            start = self.pos
            if not self.push((b"" if first else b",") + _string(key) + b":"):
                continue
            if self.prune:
                at = self.pos
                if not self.put(members[key], lambda: True):
                    dead.add(key)
                    self.back_to(start)
                    return False
                self.back_to(at)
            others = [k for k in keys if k != key]
            if self.put(members[key], lambda others=others: self.members(members, others, False, dead, then)):  # type: ignore[misc]
                return True
            self.back_to(start)
        return False


def _matcher(grammar: Grammar) -> llguidance.LLMatcher:
    # Without a mask computed per step, llguidance never refuels its lexer, so long texts
    # would exhaust the compile-time fuel: give the check the fuel generation gets over
    # many steps. `walk_masked` checks the generation path itself.
    return _fuelled(grammar.spec).deep_copy()


@functools.lru_cache(maxsize=8)
def _fuelled(spec: str) -> llguidance.LLMatcher:
    server = parser_limits()
    limits = llguidance.LLParserLimits(
        max_items_in_row=server.max_items_in_row, initial_lexer_fuel=50_000_000, verbose_errors=False
    )
    return llguidance.LLMatcher(byte_tokenizer(), spec, log_level=0, limits=limits)


def walk_masked(grammar: Grammar, text: bytes) -> str | None:
    """Feed `text` as generation does (a token mask computed before every byte, with the
    server's limits); None if it goes through, else where and why it stopped."""
    matcher = byte_compile_cache().get(grammar).matcher()
    tokenizer = byte_tokenizer()
    mask = np.zeros((tokenizer.vocab_size + 31) // 32, dtype=np.int32)
    for i, byte in enumerate(text):
        matcher.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)
        if matcher.is_error():
            return f"matcher error after {text[:i][-40:]!r}: {matcher.get_error()[:200]}"
        if not (int(mask[byte // 32]) >> (byte % 32)) & 1:
            return f"byte {i} refused after {text[:i][-40:]!r}"
        matcher.consume_token(byte)
    return None


def _string(s: str) -> bytes:
    return json.dumps(s, ensure_ascii=False).encode()


def spellings(v: Any) -> Iterator[bytes]:
    """The texts a grammar may use for a scalar."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        yield json.dumps(v, ensure_ascii=False).encode()
        return
    texts = [json.dumps(v)]
    if isinstance(v, float) and v.is_integer():
        texts.append(str(int(v)))
    if isinstance(v, int) or v.is_integer():
        texts.append(f"{int(v)}.0")
    exact = Decimal(repr(v) if isinstance(v, float) else v)
    texts.append(format(exact, "f"))
    yield from (t.encode() for t in dict.fromkeys(texts))


def writable(v: Any) -> bool:
    """Whether some JSON text the compiler can generate denotes `v`: strings (and keys)
    without C0 controls other than \\b \\f \\n \\r \\t and without DEL (llguidance writes
    those only as \\u escapes, which the grammar never writes), and without lone
    surrogates (not UTF-8)."""
    if isinstance(v, str):
        return not any(
            (ord(c) < 0x20 and c not in "\b\f\n\r\t") or c == "\x7f" or 0xD800 <= ord(c) < 0xE000 for c in v
        )
    if isinstance(v, list):
        return all(writable(x) for x in v)
    if isinstance(v, dict):
        return all(writable(k) and writable(x) for k, x in v.items())
    if isinstance(v, float):
        return v == v and v not in (float("inf"), float("-inf"))
    return True


def key_order(grammar: Grammar) -> dict[str, int]:
    """Property names in the order the compiled schema declares them (first mention
    wins): llguidance writes declared properties in schema order, so trying keys in
    this order first usually finds the one spelling at once."""
    order: dict[str, int] = {}
    stack: list[Any] = [json.loads(grammar.lark.removeprefix("start: %json "))]
    while stack:
        node = stack.pop(0)
        if isinstance(node, dict):
            props = node.get("properties")
            if isinstance(props, dict):
                for name in props:
                    order.setdefault(name, len(order))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return order


def write(
    grammar: Grammar,
    value: Any,
    *,
    steps: int = 3_000,
    prune: bool = True,
    order: dict[str, int] | None = None,
) -> bytes | None:
    """A text denoting `value` that `grammar` matches in full, or None (see _Writer for
    `prune`); Budget if the search could not decide within `steps` pieces (or nests too
    deep to search)."""
    w = _Writer(grammar, steps, prune, {} if order is None else order)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20_000))
    try:
        return bytes(w.text) if w.put(value, w.matcher.is_accepting) else None
    except RecursionError:
        raise Budget from None
    finally:
        sys.setrecursionlimit(limit)


# -- one schema, differentially ---------------------------------------------------------


@dataclass
class Outcome:
    """What one schema's instances showed. `rejected` (valid values the grammar does not
    match) and `wrong` (invalid values it matches that nothing catches afterwards) must
    stay empty; the counts say how much was checked."""

    source: str
    compiled: bool = False
    valid: int = 0
    invalid: int = 0
    caught: int = 0
    skipped: int = 0
    rejected: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)


def check_schema(source: str, schema: Any, *, seed: int, valid: int, misses: int) -> Outcome:
    """Generate `valid` guesses and `misses` near-misses for `schema` (seeded), ask the
    reference about each, and hold the non-strict, free-layout grammar to its answers."""
    from .schema_gen import Instances, NoValue

    out = Outcome(source)
    try:
        grammar = Grammar.from_json_schema(schema, strict=False)
    except GrammarError:
        return out
    out.compiled = True
    is_valid = reference(schema)
    order = key_order(grammar)
    gen = Instances(schema, seed)
    values: list[Any] = []
    for _ in range(valid):
        try:
            values.append(gen.valid())
        except (NoValue, RecursionError):
            out.skipped += 1
    misses_done = 0
    for i in range(valid + misses):
        if i < len(values):
            value = values[i]
        elif values and misses_done < misses:
            value, misses_done = gen.near_miss(values[(i - len(values)) % len(values)]), misses_done + 1
        else:
            break
        _judge(grammar, schema, is_valid, value, out, order)
    return out


def _judge(
    grammar: Grammar,
    schema: Any,
    is_valid: Callable[[Any], bool],
    value: Any,
    out: Outcome,
    order: dict[str, int],
) -> None:
    shown = json.dumps(value, ensure_ascii=False)[:300]
    try:
        if not writable(value):
            out.skipped += 1
            return
        ok = is_valid(value)
        text = write(grammar, value, order=order)
        if text is None and ok:
            text = write(grammar, value, prune=False, steps=20_000, order=order)
    except (Unverifiable, Budget, RecursionError, referencing.exceptions.Unresolvable):
        out.skipped += 1
        return
    if ok:
        out.valid += 1
        if text is None and not grammar.narrowed:
            out.rejected.append(f"{out.source}: valid value rejected: {shown}")
        elif text is not None and out.valid == 1:
            stopped = walk_masked(grammar, text)
            if stopped is not None:
                out.rejected.append(f"{out.source}: generation stopped: {stopped}: {shown}")
        return
    out.invalid += 1
    if text is None:
        return
    matched = json.loads(text)
    try:
        still_invalid = not is_valid(matched)
    except Unverifiable:
        return
    if not still_invalid:
        return  # the grammar wrote a value the reference accepts (draft 4: 1.0 as 1)
    if grammar.unenforced and validate(schema, matched):
        out.caught += 1
    else:
        out.wrong.append(f"{out.source}: invalid value accepted: {text.decode()[:300]}")

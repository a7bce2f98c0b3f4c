"""Differential testing of the JSON schema compiler: helpers shared by the test files.

`write(grammar, value)` finds a text denoting `value` that the grammar matches in full, or
None. A generator legitimately emits a subset of the texts denoting a value, so the
question "does the grammar reject this valid value?" is asked of every spelling the
compiler chooses between: object keys in any order (llguidance writes declared
properties in schema order), integral numbers with or without a fraction or exponent,
and strings written the one way the grammar writes them (raw UTF-8, only the short
escapes). The search is driven by the grammar itself: each piece is offered to a byte
matcher, which is rolled back when the piece leads nowhere.

`reference(schema)` is the reference validator: `jsonschema` with the validator class of
the schema's own draft, ECMA-262 patterns (through `regress`, as JSON Schema specifies)
and a format checker for the formats llamay asserts.
"""

from __future__ import annotations

import datetime
import functools
import json
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import jsonschema
import llguidance
import numpy as np
import referencing
import referencing.exceptions
import regress

from llamay.errors import GrammarError
from llamay.grammar import Grammar, byte_compile_cache, byte_tokenizer
from llamay.grammar.drafts import draft_of
from llamay.grammar.keywords import FORMATS
from llamay.grammar.validate import validate

__all__ = ["write", "reference", "writable", "Budget", "check_schema", "Outcome"]

VALIDATORS = {
    "draft4": jsonschema.Draft4Validator,
    "draft6": jsonschema.Draft6Validator,
    "draft7": jsonschema.Draft7Validator,
    "draft2019-09": jsonschema.Draft201909Validator,
    "draft2020-12": jsonschema.Draft202012Validator,
}


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
    limits = llguidance.LLParserLimits(initial_lexer_fuel=50_000_000, verbose_errors=False)
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


# -- the reference validator ------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _regex(pattern: str) -> Any:
    try:
        return regress.Regex(pattern, "u")
    except Exception:
        try:
            return regress.Regex(pattern)
        except Exception:
            return None


class Unverifiable(Exception):
    """A pattern the reference engine cannot compile: the instance cannot be judged."""


def ecma_search(pattern: str, text: str) -> bool:
    rx = _regex(pattern)
    if rx is None:
        raise Unverifiable(pattern)
    return rx.find(text) is not None


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    if validator.is_type(instance, "string") and not ecma_search(pattern, instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: dict[str, Any], instance: Any, schema: Any
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, sub in patterns.items():
        for key, value in instance.items():
            if ecma_search(pattern, key):
                yield from validator.descend(value, sub, path=key, schema_path=pattern)


def _additional(validator: Any, extra: Any, instance: Any, schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    props = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    others = [k for k in instance if k not in props and not any(ecma_search(p, k) for p in patterns)]
    if validator.is_type(extra, "object"):
        for key in others:
            yield from validator.descend(instance[key], extra, path=key)
    elif not extra and others:
        yield jsonschema.ValidationError(f"additional properties {sorted(others)!r} are not allowed")


def _multiple_of(validator: Any, divisor: Any, instance: Any, schema: Any) -> Iterator[Any]:
    # Decimal arithmetic: in floats 0.7 / 0.0001 is not integral, though 0.7 is a multiple.
    if not validator.is_type(instance, "number"):
        return
    if isinstance(instance, float) and instance != instance:  # pragma: no cover
        return
    try:
        bad = Decimal(repr(instance)) % Decimal(repr(divisor)) != 0
    except ArithmeticError:
        bad = True
    if bad:
        yield jsonschema.ValidationError(f"{instance} is not a multiple of {divisor}")


_TIME = re.compile(
    r"([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
)


_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_MAILBOX = re.compile(
    rf"(?:{_ATEXT}(?:\.{_ATEXT})*|\"(?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\[\x20-\x7e])*\")"
    rf"@(?:{_LABEL}(?:\.{_LABEL})*|\[(?:[0-9]{{1,3}}\.){{3}}[0-9]{{1,3}}\]|\[IPv6:[0-9A-Fa-f:.]+\])"
)


def _format_checker() -> jsonschema.FormatChecker:
    checker = jsonschema.FormatChecker(formats=())
    for name, entry in jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers.items():
        if name in FORMATS:
            checker.checkers[name] = entry

    @checker.checks("email")
    def _email(value: object) -> bool:  # RFC 5321 Mailbox (jsonschema only looks for an "@")
        return not isinstance(value, str) or _MAILBOX.fullmatch(value) is not None

    @checker.checks("time")
    def _time(value: object) -> bool:  # RFC 3339 full-time
        return not isinstance(value, str) or _TIME.fullmatch(value) is not None

    @checker.checks("date-time", raises=ValueError)
    def _date_time(value: object) -> bool:
        if not isinstance(value, str):
            return True
        date, sep, rest = value[:10], value[10:11], value[11:]
        datetime.date.fromisoformat(date)
        return (
            re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", date) is not None
            and sep in "Tt"
            and bool(sep and _TIME.fullmatch(rest))
        )

    return checker


FORMAT_CHECKER = _format_checker()


def _refuse(uri: str) -> referencing.Resource[Any]:
    raise referencing.exceptions.NoSuchResource(ref=uri)  # type: ignore[call-arg]


REGISTRY: referencing.Registry[Any] = referencing.Registry(retrieve=_refuse)  # type: ignore[call-arg]


def _minimum(validator: Any, minimum: Any, instance: Any, schema: Any) -> Iterator[Any]:
    # A boolean exclusiveMinimum next to minimum (draft 4, and OpenAPI 3.0 documents that
    # declare no draft) makes the bound exclusive: the compiler reads it that way wherever
    # it cannot mean anything else, and so does the reference.
    exclusive = schema.get("exclusiveMinimum") is True
    if (
        validator.is_type(instance, "number")
        and _num(minimum)
        and (instance < minimum or (exclusive and instance == minimum))
    ):
        yield jsonschema.ValidationError(f"{instance} is below the minimum {minimum}")


def _maximum(validator: Any, maximum: Any, instance: Any, schema: Any) -> Iterator[Any]:
    exclusive = schema.get("exclusiveMaximum") is True
    if (
        validator.is_type(instance, "number")
        and _num(maximum)
        and (instance > maximum or (exclusive and instance == maximum))
    ):
        yield jsonschema.ValidationError(f"{instance} is above the maximum {maximum}")


def _exclusive(name: str) -> Callable[..., Iterator[Any]]:
    def check(validator: Any, bound: Any, instance: Any, schema: Any) -> Iterator[Any]:
        if isinstance(bound, bool) or not validator.is_type(instance, "number"):
            return
        if (instance <= bound) if name == "min" else (instance >= bound):
            yield jsonschema.ValidationError(f"{instance} is not strictly within {bound}")

    return check


def _num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


@functools.cache
def _cls(draft: str) -> Any:
    overrides = {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional,
        "multipleOf": _multiple_of,
    }
    if draft not in ("draft4",):
        overrides.update(
            minimum=_minimum,
            maximum=_maximum,
            exclusiveMinimum=_exclusive("min"),
            exclusiveMaximum=_exclusive("max"),
        )
    return jsonschema.validators.extend(VALIDATORS[draft], overrides)


def reference(schema: Any) -> Callable[[Any], bool]:
    """is_valid(instance) under `schema`'s own draft, with ECMA-262 patterns and the
    formats llamay asserts checked. Raises Unverifiable for a pattern it cannot compile."""
    validator = _cls(draft_of(schema))(schema, registry=REGISTRY, format_checker=FORMAT_CHECKER)
    return validator.is_valid  # type: ignore[no-any-return]


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

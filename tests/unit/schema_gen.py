"""A seeded generator of JSON instances for a JSON schema, and of near-misses.

`Instances(schema, seed).valid()` builds a value meant to satisfy the schema: `$ref`s are
followed (any draft, by the compiler's own resolver), `allOf` members and reference
targets are merged, one `anyOf`/`oneOf` branch is picked, optional properties, extra
keys, pattern keys, array lengths, numbers at and between their bounds and multiples
are chosen at random. It is a guess, not a proof: the differential tests ask the
reference validator which guesses are valid. `near_miss(value)` changes one spot of a
value (a type, a key, a bound, a length).

Strings for `pattern` are drawn by a random walk over llguidance's own regex grammar for
the pattern (the reference, `regress`, then judges them); format strings come from
pools of values written the ways real documents write them.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import random
from decimal import Decimal
from typing import Any

import numpy as np

from llamay.grammar import Grammar, byte_compile_cache, byte_tokenizer
from llamay.grammar.drafts import ROOT_URI, Resolver, draft_of, translate

__all__ = ["Instances", "NoValue"]

MAX_DEPTH = 8
_TOKENIZER = byte_tokenizer()
_WEIGHTS = np.ones(_TOKENIZER.vocab_size)
_WEIGHTS[128:255] = 0.05
_WEIGHTS[ord('"')] = 6.0

# Valid values, as real documents write them (the grammar must take every one).
FORMAT_POOL: dict[str, list[str]] = {
    "date-time": [
        "2024-02-29T23:59:59Z", "1999-12-31T00:00:00.5+05:30", "2023-06-01t12:30:00z",
        "2021-01-15T08:00:00.123456-08:00", "2000-10-10T10:10:10+00:00",
    ],
    "date": ["2024-02-29", "1970-01-01", "2023-12-31", "2000-02-29"],
    "time": ["23:59:59Z", "08:30:00+01:00", "12:00:00.250-07:00", "00:00:00z"],
    "duration": ["P1D", "PT1H30M", "P3Y6M4DT12H30M5S", "P4W", "PT0S"],
    "email": ["a@example.com", "first.last+tag@sub.example.org", "x_y-z@a-b.io", "user@[192.168.0.1]"],
    "hostname": ["example.com", "a-b.c-d.org", "localhost", "xn--nxasmq6b.com", "a1.b2"],
    "ipv4": ["192.168.0.1", "0.0.0.0", "255.255.255.255", "10.0.12.7"],
    "ipv6": ["::1", "2001:db8::ff00:42:8329", "fe80::1ff:fe23:4567:890a", "::", "1:2:3:4:5:6:7:8"],
    "uri": [
        "https://example.com/a/b?c=d&e=f#g", "http://user@host:8080/p", "urn:isbn:0451450523",
        "mailto:a@example.com", "file:///etc/hosts", "https://example.com", "ftp://[2001:db8::1]/x",
        "https://example.com/%7Euser/a%20b",
    ],
    "uuid": ["123e4567-e89b-12d3-a456-426614174000", "00000000-0000-0000-0000-000000000000",
             "A987FBC9-4BED-3078-CF07-9141BA07C9F3"],
}  # fmt: skip
_PLAIN_STRINGS = [
    "", "a", "hello world", "é", "naïve café", "日本語", "emoji 🎉", 'quote " inside', "back\\slash",
    "line\nbreak", "tab\tstop", "x" * 12, "Mixed Case 123", "-", "0", "true", "null", "/path/to/file",
    "\u007f del", "a/b", "  spaced  ",
]  # fmt: skip


class NoValue(Exception):
    """The generator found nothing to offer (a false schema, a dead end, too deep)."""


class Instances:
    """Seeded guesses at valid values of one schema (see the module docstring)."""

    def __init__(self, schema: Any, seed: int) -> None:
        self.schema = schema
        self.rng = random.Random(seed)
        self.np_rng = np.random.default_rng(seed)
        self.draft = draft_of(schema)
        self.declared = isinstance(schema, dict) and isinstance(schema.get("$schema"), str)
        self.resolver = Resolver(schema, self.draft)
        self.steps = 0

    # -- valid guesses -----------------------------------------------------------------

    def valid(self) -> Any:
        self.steps = 0
        return self.value(self.schema, ROOT_URI, 0)

    def value(self, node: Any, base: str, depth: int) -> Any:
        self.steps += 1
        if depth > MAX_DEPTH * 3 or self.steps > 5000:
            raise NoValue
        flat = self.flatten(node, base, 0)
        return self.by_type(flat, base, depth)

    def flatten(self, node: Any, base: str, hops: int) -> dict[str, Any]:
        """`node` with its `$ref` targets and `allOf` members merged in and one branch of
        each `anyOf`/`oneOf` chosen."""
        if node is True:
            return {}
        if node is False or not isinstance(node, dict) or hops > 30:
            raise NoValue
        base = self.resolver.base_of(node, base)
        src = translate(node, self.draft, self.declared)
        out = {
            k: v
            for k, v in src.items()
            if k not in ("$ref", "allOf", "anyOf", "oneOf", "$defs", "definitions")
        }
        parts: list[Any] = []
        ref = src.get("$ref")
        if isinstance(ref, str):
            target = self.resolver.resolve(ref, base)
            if target is None:
                raise NoValue
            parts.append((target[0], target[1]))
        for member in src.get("allOf", []) if isinstance(src.get("allOf"), list) else []:
            parts.append((member, base))
        for key in ("anyOf", "oneOf"):
            branches = src.get(key)
            if isinstance(branches, list) and branches:
                parts.append((self.rng.choice(branches), base))
        for part, part_base in parts:
            out = merge(out, self.flatten(part, part_base, hops + 1))
        return out

    def by_type(self, s: dict[str, Any], base: str, depth: int) -> Any:
        if "const" in s:
            return copy.deepcopy(s["const"])
        if isinstance(s.get("enum"), list) and s["enum"]:
            return copy.deepcopy(self.rng.choice(s["enum"]))
        kind = self.pick_type(s)
        if kind == "object":
            return self.obj(s, base, depth)
        if kind == "array":
            return self.arr(s, base, depth)
        if kind == "string":
            return self.string(s)
        if kind in ("integer", "number"):
            return self.number(s, kind == "integer")
        if kind == "boolean":
            return self.rng.random() < 0.5
        return None

    def pick_type(self, s: dict[str, Any]) -> str:
        types = s.get("type")
        if isinstance(types, str):
            return types
        if isinstance(types, list) and types:
            return str(self.rng.choice(types))
        if any(k in s for k in ("properties", "required", "additionalProperties", "patternProperties")):
            return "object"
        if any(k in s for k in ("items", "prefixItems", "minItems", "maxItems")):
            return "array"
        if any(k in s for k in ("pattern", "format", "minLength", "maxLength")):
            return "string"
        if any(k in s for k in ("minimum", "maximum", "multipleOf", "exclusiveMinimum", "exclusiveMaximum")):
            return "number"
        return self.rng.choice(["string", "integer", "number", "boolean", "null", "object", "array"])

    def obj(self, s: dict[str, Any], base: str, depth: int) -> dict[str, Any]:
        props = s.get("properties") if isinstance(s.get("properties"), dict) else {}
        patterns = s.get("patternProperties") if isinstance(s.get("patternProperties"), dict) else {}
        extra = s.get("additionalProperties", True)
        required = (
            [k for k in s.get("required", []) if isinstance(k, str)]
            if isinstance(s.get("required"), list)
            else []
        )
        shallow = depth >= MAX_DEPTH
        keys = list(dict.fromkeys(required))
        for k in props:
            if k not in keys and not shallow and self.rng.random() < 0.45:
                keys.append(k)
        out: dict[str, Any] = {}
        for k in keys:
            out[k] = self.value(
                props[k] if k in props else self.extra_schema(k, patterns, extra), base, depth + 1
            )
        if patterns and not shallow and self.rng.random() < 0.6:
            pattern = self.rng.choice(list(patterns))
            key = self.pattern_string(pattern, {})
            if key is not None and key not in props:
                out[key] = self.value(self.extra_schema(key, patterns, extra), base, depth + 1)
        wanted = s.get("minProperties", 0) if isinstance(s.get("minProperties"), int) else 0
        if extra is not False and not shallow and (self.rng.random() < 0.25 or len(out) < wanted):
            for i in range(max(1, wanted - len(out))):
                key = self.rng.choice(["extra", "x-note", "ключ", "k" + str(i)]) + ("" if i == 0 else str(i))
                if key not in props:
                    out[key] = self.value(self.extra_schema(key, patterns, extra), base, depth + 1)
        limit = s.get("maxProperties")
        if isinstance(limit, int):
            for k in [k for k in out if k not in required][: max(0, len(out) - limit)]:
                del out[k]
        items = list(out.items())
        self.rng.shuffle(items)
        return dict(items)

    def extra_schema(self, key: str, patterns: dict[str, Any], extra: Any) -> Any:
        from .schema_reference import ecma_search

        matching = []
        for p, sub in patterns.items():
            try:
                if ecma_search(p, key):
                    matching.append(sub)
            except Exception:
                continue
        if matching:
            return matching[0] if len(matching) == 1 else {"allOf": matching}
        return extra

    def arr(self, s: dict[str, Any], base: str, depth: int) -> list[Any]:
        prefix = s.get("prefixItems") if isinstance(s.get("prefixItems"), list) else []
        items = s.get("items", True)
        lo = s.get("minItems", 0) if isinstance(s.get("minItems"), int) else 0
        hi = s.get("maxItems") if isinstance(s.get("maxItems"), int) else None
        top = lo if depth >= MAX_DEPTH else lo + 3
        n = self.rng.randint(lo, top if hi is None else max(lo, min(hi, top)))
        if items is False:
            n = min(n, len(prefix))
        out = []
        for i in range(n):
            out.append(self.value(prefix[i] if i < len(prefix) else items, base, depth + 1))
        if s.get("uniqueItems") is True:
            seen: list[Any] = []
            for v in out:
                if not any(_same(v, w) for w in seen):
                    seen.append(v)
            out = seen if len(seen) >= lo else out
        if "contains" in s and self.rng.random() < 0.8:
            out.append(self.value(s["contains"], base, depth + 1))
        return out

    def string(self, s: dict[str, Any]) -> str:
        lo = s.get("minLength", 0) if isinstance(s.get("minLength"), int) else 0
        hi = s.get("maxLength") if isinstance(s.get("maxLength"), int) else None
        fmt = s.get("format")
        if isinstance(s.get("pattern"), str):
            found = self.pattern_string(
                s["pattern"], {"minLength": lo, **({"maxLength": hi} if hi is not None else {})}
            )
            if found is not None:
                return found
        if isinstance(fmt, str) and fmt in FORMAT_POOL and self.rng.random() < 0.9:
            return self.rng.choice(FORMAT_POOL[fmt])
        text = self.rng.choice(_PLAIN_STRINGS)
        while len(text) < lo:
            text += self.rng.choice("abcxyz é7-_")
        if hi is not None and len(text) > hi:
            text = text[:hi]
        return text

    def pattern_string(self, pattern: str, bounds: dict[str, Any]) -> str | None:
        grammar = _pattern_grammar(json.dumps({"type": "string", "pattern": pattern, **bounds}))
        if grammar is None:
            return None
        text = walk(grammar, self.np_rng, limit=200)
        try:
            return json.loads(text) if text is not None else None  # type: ignore[no-any-return]
        except json.JSONDecodeError:
            return None

    def number(self, s: dict[str, Any], integer: bool) -> int | float:
        lo, lo_open = _bound(s, "minimum", "exclusiveMinimum", max)
        hi, hi_open = _bound(s, "maximum", "exclusiveMaximum", min)
        step = s.get("multipleOf")
        step = (
            Decimal(repr(step))
            if isinstance(step, int | float) and not isinstance(step, bool) and step > 0
            else None
        )
        if integer:
            step = Decimal(1) if step is None else step * max(1, math.ceil(1 / step)) if step < 1 else step
        candidates: list[Decimal] = []
        if lo is not None:
            candidates += [lo, lo + 1, lo + Decimal("0.5")]
        if hi is not None:
            candidates += [hi, hi - 1, hi - Decimal("0.25")]
        if lo is not None and hi is not None:
            candidates.append((lo + hi) / 2)
        if lo is None and hi is None:
            candidates += [Decimal(0), Decimal(1), Decimal(-7), Decimal("10000"), Decimal("3.25"), Decimal("1e21"),
                           Decimal("-0.001"), Decimal("123456789012"), Decimal("2.5E-7")]  # fmt: skip
        elif lo is not None:
            candidates += [lo + 100, lo + Decimal("12345.5")]
        else:
            assert hi is not None
            candidates += [hi - 100, hi - Decimal("999.75")]
        value = self.rng.choice(candidates)
        if step is not None:
            value = (value / step).to_integral_value() * step
            if lo is not None and (value < lo or (lo_open and value == lo)):
                value += step
            if hi is not None and (value > hi or (hi_open and value == hi)):
                value -= step
        elif integer:
            value = value.to_integral_value()
        if value == value.to_integral_value() and (integer or self.rng.random() < 0.6):
            # An integral value, written as an integer or (sometimes) with a zero fraction.
            as_int = int(value)
            zero_fraction = self.rng.random() < 0.3 and (not integer or self.draft != "draft4")
            return float(as_int) if zero_fraction and abs(as_int) < 2**53 else as_int
        return float(value)

    # -- near-misses -------------------------------------------------------------------

    def near_miss(self, value: Any) -> Any:
        """`value` with one spot changed."""
        out = copy.deepcopy(value)
        spots = list(_spots(out, ()))
        path = self.rng.choice(spots)
        parent, last = _locate(out, path)
        current = out if parent is None else parent[last]
        choice = self.rng.random()
        if isinstance(current, dict) and current and choice < 0.4:
            del current[self.rng.choice(list(current))]
            return out
        if isinstance(current, dict) and choice < 0.6:
            current["unexpected"] = 1
            return out
        if isinstance(current, list) and choice < 0.5:
            current.append(copy.deepcopy(current[0]) if current else 0)
            return out
        if isinstance(current, int | float) and not isinstance(current, bool) and choice < 0.7:
            replacement: Any = self.rng.choice(
                [current + 1, current - 1, current + 0.5, -current, current * 1000]
            )
        elif isinstance(current, str) and choice < 0.7:
            replacement = self.rng.choice([current + "!", current[:-1], current.upper(), "x" + current, ""])
        else:
            replacement = self.rng.choice([None, True, 0, 1.5, "", "text", [], {}])
        if parent is None:
            return replacement
        parent[last] = replacement
        return out


@functools.lru_cache(maxsize=1024)
def _pattern_grammar(schema: str) -> Grammar | None:
    try:
        return Grammar.from_lark("start: %json " + schema, param="pattern")
    except Exception:
        return None


def merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two flattened schemas as one (a guess at their intersection)."""
    out = dict(a)
    for k, v in b.items():
        if k not in out:
            out[k] = v
        elif k == "properties" and isinstance(v, dict) and isinstance(out[k], dict):
            props = dict(out[k])
            for name, sub in v.items():
                props[name] = {"allOf": [props[name], sub]} if name in props else sub
            out[k] = props
        elif k == "required" and isinstance(v, list) and isinstance(out[k], list):
            out[k] = list(dict.fromkeys([*out[k], *v]))
        elif k == "type":
            mine = out[k] if isinstance(out[k], list) else [out[k]]
            theirs = v if isinstance(v, list) else [v]
            both = [t for t in mine if t in theirs or (t == "integer" and "number" in theirs)]
            both += [t for t in theirs if t == "integer" and "number" in mine and t not in both]
            out[k] = both or theirs
        elif k in ("minimum", "minLength", "minItems", "minProperties", "exclusiveMinimum"):
            out[k] = max(out[k], v) if _num(v) and _num(out[k]) else v
        elif k in ("maximum", "maxLength", "maxItems", "maxProperties", "exclusiveMaximum"):
            out[k] = min(out[k], v) if _num(v) and _num(out[k]) else v
        elif k == "enum" and isinstance(v, list) and isinstance(out[k], list):
            out[k] = [x for x in out[k] if any(_same(x, y) for y in v)] or v
        elif k in ("items", "additionalProperties") and v is not True and out[k] is not True:
            out[k] = {"allOf": [out[k], v]}
    return out


def _num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _bound(s: dict[str, Any], inclusive: str, exclusive: str, pick: Any) -> tuple[Decimal | None, bool]:
    found: list[tuple[Decimal, bool]] = []
    if _num(s.get(inclusive)) and math.isfinite(s[inclusive]):
        found.append((Decimal(repr(s[inclusive])), False))
    if _num(s.get(exclusive)) and math.isfinite(s[exclusive]):
        found.append((Decimal(repr(s[exclusive])), True))
    if not found:
        return None, False
    best = pick(v for v, _ in found)
    return best, any(v == best and open_ for v, open_ in found)


def _spots(v: Any, path: tuple[Any, ...]) -> Any:
    yield path
    if isinstance(v, dict):
        for k, x in v.items():
            yield from _spots(x, (*path, k))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from _spots(x, (*path, i))


def _locate(root: Any, path: tuple[Any, ...]) -> tuple[Any, Any]:
    if not path:
        return None, None
    node = root
    for p in path[:-1]:
        node = node[p]
    return node, path[-1]


def walk(grammar: Grammar, rng: np.random.Generator, limit: int = 400) -> str | None:
    """One random text the grammar allows (byte tokenizer), or None if it got too long."""
    matcher = byte_compile_cache().get(grammar).matcher()
    mask = np.zeros((_TOKENIZER.vocab_size + 31) // 32, dtype=np.int32)
    eos = _TOKENIZER.eos_token
    out = bytearray()
    while len(out) < limit:
        matcher.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)
        if matcher.is_error():
            return None
        allowed = np.unpackbits(mask.view(np.uint8), bitorder="little")[: _TOKENIZER.vocab_size].astype(bool)
        if allowed[eos] and (rng.random() < 0.3 or allowed.sum() == 1):
            break
        allowed[eos] = False
        choices = np.flatnonzero(allowed)
        if not len(choices):
            return None
        token = int(rng.choice(choices, p=_WEIGHTS[choices] / _WEIGHTS[choices].sum()))
        if not matcher.consume_token(token):
            return None
        out.append(token)
    else:
        return None
    try:
        return out.decode()
    except UnicodeDecodeError:
        return None

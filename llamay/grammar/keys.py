"""`propertyNames`: which keys a key schema allows, enforced by rewriting the object's own
keywords, since llguidance has no key schemas.

`KeyReader.read` turns a key schema into a `KeySet`: a finite list of keys, or the keys a
pattern finds (every key when there is none) minus a finite list. Only what a key schema
can say about a JSON object key counts: a key is always a string, so `{"type": "string"}`,
number, array and object keywords, annotations and unknown keywords allow every key;
`enum`/`const` list keys, `pattern`, `minLength`/`maxLength` and the pattern formats
(formats.PATTERN_FORMATS) are patterns; `$ref`, `allOf`, `anyOf`, `oneOf` over finite
lists, `not` of a finite list, and booleans combine them. What has no exact `KeySet`
(two different patterns at once, `not` of a pattern, a format llguidance checks itself,
conditionals, dynamic references) raises `Unenforceable`.

`enforce_keys` then rewrites one object schema so that the same instances are valid
without `propertyNames`:

- a named property the set refuses becomes `false` (it may not appear), and so does every
  excluded key;
- a finite set becomes named properties (each with the schema its key had: the matching
  `patternProperties`, else `additionalProperties`), and no other key is allowed;
- a pattern `P` becomes `patternProperties: {P: <additionalProperties>}` with no other key
  allowed, when the object has no `patternProperties` of its own and no named property
  that `P` finds would thereby take the additional schema too (patterns also apply to
  named properties; a regex cannot subtract names from `P`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from .checks import LiteralProblem, count
from .drafts import Resolver, pointer, translate
from .formats import PATTERN_FORMATS
from .keywords import FORMATS
from .negation import class_char

__all__ = [
    "KeySet",
    "KeyReader",
    "Unenforceable",
    "enforce_keys",
    "search_budget",
    "ALL",
    "NONE",
    "literal_pattern",
]

# Keywords that constrain only numbers, arrays or objects: a key (a string) passes them.
_NOT_FOR_STRINGS = frozenset(
    {
        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
        "items", "prefixItems", "additionalItems", "contains", "minContains", "maxContains",
        "minItems", "maxItems", "uniqueItems", "unevaluatedItems",
        "properties", "patternProperties", "additionalProperties", "required",
        "minProperties", "maxProperties", "propertyNames", "dependentRequired",
        "dependentSchemas", "dependencies", "unevaluatedProperties",
    }
)  # fmt: skip
MAX_DEPTH = 64
# What the key rewrite of one schema may cost: a search with an already compiled pattern
# takes tens of microseconds, compiling a pattern about ten milliseconds (measured), so both
# are bounded; a key schema that lists many keys against many patterns is refused beyond
# them rather than worked through.
MAX_SEARCHES = 20_000
MAX_PATTERNS = 64


@dataclass
class _Budget:
    searches: int
    patterns: set[str] = field(default_factory=set)


_BUDGET: ContextVar[_Budget | None] = ContextVar("llamay_key_searches", default=None)


class Unenforceable(Exception):
    """The key schema has no exact rewrite; `reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class KeySet:
    """Keys an object may have: exactly `finite` when it is set; otherwise the strings
    `pattern` finds (an ECMA-262 search; None finds every string) except `excluded`."""

    finite: tuple[str, ...] | None = None
    pattern: str | None = None
    excluded: frozenset[str] = field(default_factory=frozenset)

    @property
    def everything(self) -> bool:
        return self.finite is None and self.pattern is None and not self.excluded

    def contains(self, key: str) -> bool:
        if self.finite is not None:
            return key in self.finite
        return key not in self.excluded and (self.pattern is None or _search(self.pattern, key))

    def both(self, other: KeySet) -> KeySet:
        """The keys in this set and in `other`."""
        if self.finite is not None:
            return KeySet(finite=tuple(k for k in self.finite if other.contains(k)))
        if other.finite is not None:
            return other.both(self)
        if self.pattern is not None and other.pattern is not None and self.pattern != other.pattern:
            raise Unenforceable("two different key patterns cannot be combined into one")
        return _regex(self.pattern or other.pattern, self.excluded | other.excluded)

    def either(self, other: KeySet) -> KeySet:
        """The keys in this set or in `other`."""
        if self.finite is not None and other.finite is not None:
            return KeySet(finite=_unique([*self.finite, *other.finite]))
        if self.finite is not None:
            return other.either(self)
        if other.finite is not None:
            extra = [k for k in other.finite if not self.contains(k)]
            excluded = self.excluded - set(other.finite)
            if self.pattern is None:
                return _regex(None, excluded)
            missing = [k for k in extra if not _search(self.pattern, k)]
            return _regex(_alternation([self.pattern, *map(literal_pattern, missing)]), excluded)
        pattern = (
            None
            if self.pattern is None or other.pattern is None
            else _alternation([self.pattern, other.pattern])
        )
        lost = {e for e in self.excluded | other.excluded if not (self.contains(e) or other.contains(e))}
        return _regex(pattern, frozenset(lost))

    def complement(self) -> KeySet:
        """The keys not in this set."""
        if self.finite is not None:
            return KeySet(excluded=frozenset(self.finite))
        if self.pattern is None:
            return KeySet(finite=tuple(sorted(self.excluded)))
        raise Unenforceable("the keys a pattern does not find cannot be written as a pattern")


ALL = KeySet()
NONE = KeySet(finite=())


def _regex(pattern: str | None, excluded: Iterable[str]) -> KeySet:
    # Excluded keys the pattern does not find are excluded anyway.
    kept = frozenset(e for e in excluded if pattern is None or _search(pattern, e))
    return KeySet(pattern=pattern, excluded=kept)


def _unique(keys: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(keys))


def _alternation(patterns: list[str]) -> str:
    # A key is found by one of several searches iff the alternation finds it.
    return patterns[0] if len(patterns) == 1 else "|".join(f"(?:{p})" for p in patterns)


def literal_pattern(key: str) -> str:
    """An anchored pattern finding exactly `key`."""
    return "^" + "".join(f"[{class_char(c)}]" for c in key) + "$"


@contextlib.contextmanager
def search_budget(n: int = MAX_SEARCHES) -> Iterator[None]:
    """Within the block, at most `n` key pattern searches over at most MAX_PATTERNS
    different patterns; more raise Unenforceable."""
    token = _BUDGET.set(_Budget(n))
    try:
        yield
    finally:
        _BUDGET.reset(token)


def _search(pattern: str, key: str) -> bool:
    # Imported here: validate imports the compiler, which imports this module.
    from .validate import UncheckablePattern, safe_search

    budget = _BUDGET.get()
    if budget is not None:
        budget.searches -= 1
        budget.patterns.add(pattern)
        if budget.searches < 0 or len(budget.patterns) > MAX_PATTERNS:
            raise Unenforceable("the key schema lists too many keys to check against its patterns")
    try:
        return safe_search(pattern, key)
    except UncheckablePattern:
        raise Unenforceable(f"the key pattern {pattern!r} cannot be compiled") from None


class KeyReader:
    """Reads key schemas of one document (its `$ref`s resolve through `resolver`)."""

    def __init__(self, resolver: Resolver, draft: str, declared: bool) -> None:
        self.resolver = resolver
        self.draft = draft
        self.declared = declared

    def read(self, node: Any, base: str, depth: int = 0) -> KeySet:
        """The keys `node` allows. Raises LiteralProblem for a malformed keyword,
        Unenforceable where there is no exact KeySet."""
        if node is True:
            return ALL
        if node is False:
            return NONE
        if not isinstance(node, dict):
            raise LiteralProblem("must be a schema", "invalid JSON schema keyword")
        if depth >= MAX_DEPTH:
            raise Unenforceable(f"key schemas may nest at most {MAX_DEPTH} deep")
        base = self.resolver.base_of(node, base)
        src = translate(node, self.draft, self.declared)
        keys = ALL
        for key, value in src.items():
            if key not in _NOT_FOR_STRINGS:
                keys = keys.both(self._keyword(key, value, src, base, depth))
        return keys

    def _keyword(self, key: str, value: Any, src: dict[str, Any], base: str, depth: int) -> KeySet:
        if key == "type":
            types = [value] if isinstance(value, str) else value
            if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
                raise LiteralProblem("must be a type name or a list of them", "invalid JSON schema keyword")
            return ALL if "string" in types else NONE
        if key in ("enum", "const"):
            values = [value] if key == "const" else value
            if not isinstance(values, list):
                raise LiteralProblem("must be a list", "invalid JSON schema keyword")
            return KeySet(finite=_unique(v for v in values if isinstance(v, str)))
        if key == "pattern":
            if not isinstance(value, str):
                raise LiteralProblem("must be a string", "invalid JSON schema keyword")
            _search(value, "")  # refuses a pattern the engine cannot compile
            return KeySet(pattern=value)
        if key in ("minLength", "maxLength"):
            return _length(src)
        if key == "format":
            if value in PATTERN_FORMATS:
                return KeySet(pattern=PATTERN_FORMATS[value])
            if value in FORMATS:
                raise Unenforceable(f"format {value!r} cannot be checked on keys")
            return ALL  # an annotation
        if key == "$ref":
            return self._ref(value, base, depth)
        if key in ("allOf", "anyOf", "oneOf"):
            return self._combine(key, value, base, depth)
        if key == "not":
            return self.read(value, base, depth + 1).complement()
        if key == "if" and ("then" in src or "else" in src):
            raise Unenforceable("conditional key schemas are not supported")
        if key in ("$dynamicRef", "$recursiveRef"):
            raise Unenforceable(f"'{key}' in a key schema is not supported")
        return ALL  # annotations and unknown keywords

    def _ref(self, value: Any, base: str, depth: int) -> KeySet:
        if not isinstance(value, str):
            raise LiteralProblem("must be a string", "invalid JSON schema keyword")
        target = self.resolver.resolve(value, base)
        if target is None:
            raise Unenforceable(f"cannot resolve {value!r}: only references within the schema are followed")
        node, target_base, _ = target
        return self.read(node, target_base, depth + 1)

    def _combine(self, key: str, value: Any, base: str, depth: int) -> KeySet:
        if not isinstance(value, list) or not value:
            raise LiteralProblem("must be a non-empty list of schemas", "invalid JSON schema keyword")
        parts = [self.read(v, base, depth + 1) for v in value]
        if key == "oneOf":
            return _exactly_one(parts)
        out = parts[0]
        for p in parts[1:]:
            out = out.both(p) if key == "allOf" else out.either(p)
        return out


def _length(src: dict[str, Any]) -> KeySet:
    low = count(src.get("minLength", 0))
    high = count(src["maxLength"]) if "maxLength" in src else None
    if low == 0 and high is None:
        return ALL
    # `[\s\S]` is one code point, as JSON Schema counts length.
    upper = "" if high is None else str(high)
    return KeySet(pattern=f"^[\\s\\S]{{{low},{upper}}}$")


def _exactly_one(parts: list[KeySet]) -> KeySet:
    if any(p.finite is None for p in parts):
        raise Unenforceable("'oneOf' over key patterns is not supported")
    every = [k for p in parts for k in p.finite or ()]
    return KeySet(finite=_unique(k for k in every if every.count(k) == 1))


def enforce_keys(
    src: dict[str, Any], keys: KeySet, alias: Callable[[Any, str], Any], path: str
) -> dict[str, Any]:
    """`src` (one translated schema object at JSON pointer `path`) without `propertyNames`,
    its key set enforced by the object's own keywords instead (see the module docstring).
    `alias(subschema, pointer)` gives a stand-in for a subschema used under several keys,
    so that it is compiled once. Raises Unenforceable where no exact rewrite exists."""
    out = {k: v for k, v in src.items() if k != "propertyNames"}
    if keys.everything:
        return out
    props, patterns, extra = _object_parts(out)
    if "unevaluatedProperties" in out and out["unevaluatedProperties"] not in (True, {}):
        raise Unenforceable("'unevaluatedProperties' next to a key schema is not supported")
    props = {k: (v if keys.contains(k) else False) for k, v in props.items()}
    if keys.finite is not None:
        for key in keys.finite:
            matched = [
                alias(s, pointer(path, "patternProperties", p))
                for p, s in patterns.items()
                if _search(p, key)
            ]
            if key in props:
                if matched and props[key] is not False:
                    props[key] = {"allOf": [props[key], *matched]}
            elif matched:
                props[key] = matched[0] if len(matched) == 1 else {"allOf": matched}
            elif extra is not False:
                props[key] = alias(extra, pointer(path, "additionalProperties"))
        out.pop("patternProperties", None)
        out["additionalProperties"] = False
    else:
        for key in sorted(keys.excluded - set(props)):
            props[key] = False
        if keys.pattern is not None and patterns:
            raise Unenforceable("a key pattern next to 'patternProperties' is not supported")
        if keys.pattern is not None and extra is not False:
            found = [k for k, v in props.items() if v is not False]
            if found and extra not in (True, {}):
                raise Unenforceable(
                    f"the key pattern also finds the named property {found[0]!r}, which would take "
                    "the additional properties' schema"
                )
            out["patternProperties"] = {keys.pattern: extra}
            out["additionalProperties"] = False
    if props or "properties" in out:
        out["properties"] = props
    return out


def _object_parts(src: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], Any]:
    props = src.get("properties", {})
    patterns = src.get("patternProperties", {})
    extra = src.get("additionalProperties", True)
    schemas = (dict, bool)
    well_formed = (
        isinstance(props, dict)
        and isinstance(patterns, dict)
        and all(isinstance(v, schemas) for v in (*props.values(), *patterns.values()))
        and isinstance(extra, schemas)
    )
    if not well_formed:
        raise LiteralProblem(
            "properties, patternProperties and additionalProperties must be schemas",
            "invalid JSON schema keyword",
        )
    return dict(props), patterns, extra

"""`not`, rewritten into positive JSON schema that llguidance can enforce.

`Negation.negate(schema)` takes an already-compiled (2020-12, exact) subschema and returns a
schema accepting exactly the values it rejects, or None when that cannot be said
positively (a "general form": negated patterns, formats, items, objects or arrays in an
enum, ...). A schema is a conjunction of its keywords, so its negation is the anyOf of the
keywords' negations; each keyword only constrains values of its own type, so its negation
is "a value of that type that fails it".

One negation is narrower than exact: "not an integer" would include non-integral numbers,
which no keyword can say, so numbers are left out and the caller is told (`narrowed`).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["Negation", "complement_pattern", "class_char", "TYPES"]

TYPES = ("null", "boolean", "object", "array", "number", "string")  # integer is within number
_MAX_STRING = 400  # longer enum strings make the complement regex recurse too deep
_ANY = "(?s:.)"


class Negation:
    """One negation pass. `narrowed` is set when the result accepts fewer values than the
    exact complement (still sound: it never accepts a value the original accepts)."""

    def __init__(self, defs: dict[str, Any]) -> None:
        self.defs = defs
        self.narrowed = False
        self._active: set[str] = set()

    def negate(self, schema: Any) -> Any | None:
        """A schema for the values `schema` rejects, or None (general form)."""
        if schema is True or schema == {}:
            return False
        if schema is False:
            return True
        if not isinstance(schema, dict):
            return None
        branches: list[Any] = []
        for key, value in schema.items():
            neg = self._keyword(key, value, schema)
            if neg is None:
                return None
            if neg is True:
                return True
            if neg is not False:
                branches.append(neg)
        if not branches:
            return False
        return branches[0] if len(branches) == 1 else {"anyOf": branches}

    def _keyword(self, key: str, value: Any, node: dict[str, Any]) -> Any | None:
        if key == "type":
            return self._not_type([value] if isinstance(value, str) else list(value))
        if key in ("const", "enum"):
            return _not_values([value] if key == "const" else list(value))
        if key == "required":
            keys = list(dict.fromkeys(value))
            if not keys:
                return False
            others = {"type": [t for t in TYPES if t != "object"]}
            return {"anyOf": [others, *({"type": "object", "properties": {k: False}} for k in keys)]}
        if key in _BOUNDS:
            kind, opposite, shift = _BOUNDS[key]
            if kind == "number":
                return {"type": "number", opposite: value}
            limit = value + shift
            return False if limit < 0 else {"type": kind, opposite: limit}
        if key == "properties":
            alts = []
            for name, sub in value.items():
                neg = self.negate(sub)
                if neg is None:
                    return None
                if neg is not False:
                    alts.append({"type": "object", "required": [name], "properties": {name: neg}})
            return {"anyOf": alts} if alts else False
        if key == "anyOf":
            parts = [self.negate(s) for s in value]
            return None if any(p is None for p in parts) else {"allOf": parts}
        if key == "allOf":
            parts = [self.negate(s) for s in value]
            return None if any(p is None for p in parts) else {"anyOf": parts}
        if key == "$ref":
            name = value.removeprefix("#/$defs/")
            if name in self._active or name not in self.defs:
                return None  # recursive: no finite positive form
            self._active.add(name)
            try:
                return self.negate(self.defs[name])
            finally:
                self._active.discard(name)
        return None

    def _not_type(self, types: list[str]) -> Any:
        if "number" in types:
            types = [*types, "integer"]
        rest = [t for t in TYPES if t not in types]
        if "integer" in types and "number" not in types:
            self.narrowed = True  # non-integral numbers are valid but not generated
            rest.remove("number")
        return {"type": rest} if rest else False


# keyword -> (instance type, keyword of the complement, shift of the count)
_BOUNDS: dict[str, tuple[str, str, int]] = {
    "minimum": ("number", "exclusiveMaximum", 0),
    "maximum": ("number", "exclusiveMinimum", 0),
    "exclusiveMinimum": ("number", "maximum", 0),
    "exclusiveMaximum": ("number", "minimum", 0),
    "minLength": ("string", "maxLength", -1),
    "maxLength": ("string", "minLength", 1),
    "minItems": ("array", "maxItems", -1),
    "maxItems": ("array", "minItems", 1),
    "minProperties": ("object", "maxProperties", -1),
    "maxProperties": ("object", "minProperties", 1),
}


def _not_values(values: list[Any]) -> Any | None:
    """Every JSON value except `values`; None if one of them is an object or array."""
    strings, numbers, flags = set(), set(), set()
    has_null = False
    for v in values:
        if v is None:
            has_null = True
        elif isinstance(v, bool):
            flags.add(v)
        elif isinstance(v, int | float):
            if not math.isfinite(v):
                return None
            numbers.add(v)
        elif isinstance(v, str):
            strings.add(v)
        else:
            return None
    alts: list[Any] = [{"type": t} for t in ("object", "array")]
    if not has_null:
        alts.append({"type": "null"})
    if len(flags) < 2:
        alts.append({"type": "boolean"} if not flags else {"const": not next(iter(flags))})
    if not numbers:
        alts.append({"type": "number"})
    else:
        ordered = sorted(numbers)
        alts.append({"type": "number", "exclusiveMaximum": ordered[0]})
        alts += [
            {"type": "number", "exclusiveMinimum": lo, "exclusiveMaximum": hi}
            for lo, hi in zip(ordered, ordered[1:], strict=False)
        ]
        alts.append({"type": "number", "exclusiveMinimum": ordered[-1]})
    if not strings:
        alts.append({"type": "string"})
    else:
        pattern = complement_pattern(sorted(strings))
        if pattern is None:
            return None
        alts.append({"type": "string", "pattern": pattern})
    return {"anyOf": alts}


def complement_pattern(strings: list[str]) -> str | None:
    """An anchored regex (Rust syntax, no lookaround) matching every string except those
    in `strings`, built from their trie: at each node, either leave the trie (a character
    no listed string continues with, then anything) or follow an edge; ending is allowed
    exactly at nodes where no listed string ends. None if a string is too long."""
    if any(len(s) > _MAX_STRING for s in strings):
        return None
    trie: dict[str, Any] = {}
    for s in strings:
        node = trie
        for ch in s:
            node = node.setdefault(ch, {})
        node[""] = True
    return "^" + _node(trie) + "$"


def _node(node: dict[str, Any]) -> str:
    edges = sorted(k for k in node if k)
    leave = ("[^" + "".join(map(class_char, edges)) + "]" if edges else _ANY) + _ANY + "*"
    alts = [leave] + ["[" + class_char(c) + "]" + _node(node[c]) for c in edges]
    body = "(?:" + "|".join(alts) + ")"
    return body if node.get("") else body + "?"


def class_char(ch: str) -> str:
    """`ch` written to stand for itself inside a character class."""
    if ch in "\\]^-[&~|":
        return "\\" + ch
    if ch == "\n":
        return "\\n"
    if ch == "\t":
        return "\\t"
    if ch == "\r":
        return "\\r"
    if ord(ch) < 0x20 or ord(ch) == 0x7F:
        return f"\\x{{{ord(ch):x}}}"
    return ch

"""Provable exclusivity of `oneOf` branches.

`oneOf` accepts a value valid under exactly one branch. When no value can satisfy two
branches at once, that is the same as `anyOf`, which a grammar enforces. `exclusive`
proves this pairwise from simple, sound facts about each branch (never from what a
branch might allow): disjoint types, disjoint const/enum sets, a required discriminator
property with disjoint const/enum values, or a key one branch requires that the other
forbids (`additionalProperties: false`). When it cannot prove it, llguidance may still
(the caller asks it); otherwise the oneOf cannot be enforced.
"""

from __future__ import annotations

import json
from itertools import combinations
from typing import Any

__all__ = ["exclusive"]

_ALL = frozenset({"null", "boolean", "object", "array", "integer", "number", "string"})


def exclusive(branches: list[Any], defs: dict[str, Any]) -> bool:
    """No JSON value is valid under two of `branches` (compiled 2020-12 subschemas whose
    `$ref`s point into `defs`)."""
    facts = [_Facts(_deref(b, defs), defs) for b in branches]
    return all(_disjoint(a, b) for a, b in combinations(facts, 2))


def _deref(schema: Any, defs: dict[str, Any]) -> Any:
    for _ in range(16):  # a chain of plain $refs, not a cycle
        if isinstance(schema, dict) and set(schema) == {"$ref"}:
            schema = defs.get(str(schema["$ref"]).removeprefix("#/$defs/"), schema)
        else:
            break
    return schema


def _key(value: Any) -> str:
    # JSON equality: 1 == 1.0, but true != 1.
    def norm(v: Any) -> Any:
        if isinstance(v, float) and v.is_integer():
            return int(v)
        if isinstance(v, bool) or v is None or isinstance(v, int | str):
            return [type(v).__name__ if isinstance(v, bool) else "v", v]
        if isinstance(v, list):
            return [norm(x) for x in v]
        if isinstance(v, dict):
            return {k: norm(x) for k, x in v.items()}
        return v

    return json.dumps(norm(value), sort_keys=True)


def _values(schema: Any) -> set[str] | None:
    """The finite set of values `schema` allows, if it says so with const/enum."""
    if not isinstance(schema, dict):
        return set() if schema is False else None
    sets = []
    if "const" in schema:
        sets.append({_key(schema["const"])})
    if isinstance(schema.get("enum"), list):
        sets.append({_key(v) for v in schema["enum"]})
    for sub in schema.get("allOf", []):
        inner = _values(sub)
        if inner is not None:
            sets.append(inner)
    if not sets:
        return None
    out = sets[0]
    for s in sets[1:]:
        out &= s
    return out


def _types(schema: Any) -> frozenset[str]:
    if schema is False:
        return frozenset()
    if not isinstance(schema, dict):
        return _ALL
    declared = schema.get("type")
    types = _ALL if declared is None else frozenset([declared] if isinstance(declared, str) else declared)
    if "number" in types:
        types |= {"integer"}
    values = _values(schema)
    if values is not None:
        kinds = {_kind(json.loads(v)) for v in values}
        types &= kinds | ({"number"} if "integer" in kinds else set())
    for sub in schema.get("allOf", []):
        types &= _types(sub)
    return types


def _kind(norm: Any) -> str:
    if isinstance(norm, list) and len(norm) == 2 and norm[0] in ("bool", "v"):
        v = norm[1]
        if norm[0] == "bool":
            return "boolean"
        return "null" if v is None else "integer" if isinstance(v, int) else "string"
    if isinstance(norm, list):
        return "array"
    return "object" if isinstance(norm, dict) else "number"


class _Facts:
    def __init__(self, schema: Any, defs: dict[str, Any]) -> None:
        self.schema = schema
        self.types = _types(schema)
        self.values = _values(schema)
        node = schema if isinstance(schema, dict) else {}
        self.required = set(node.get("required", []))
        props = node.get("properties", {})
        self.props = {k: _values(_deref(v, defs)) for k, v in props.items()}
        self.closed = node.get("additionalProperties") is False and "patternProperties" not in node


def _overlap(a: frozenset[str], b: frozenset[str]) -> frozenset[str]:
    common = a & b
    if ("integer" in a and "number" in b) or ("number" in a and "integer" in b):
        common |= {"integer"}
    return common


def _disjoint(a: _Facts, b: _Facts) -> bool:
    common = _overlap(a.types, b.types)
    if not common:
        return True
    if a.values is not None and b.values is not None and not (a.values & b.values):
        return True
    if common != {"object"}:
        return False  # the object facts below say nothing about other types
    for key in a.required & b.required:
        va, vb = a.props.get(key), b.props.get(key)
        if va is not None and vb is not None and not (va & vb):
            return True
    return bool((a.closed and (b.required - set(a.props))) or (b.closed and (a.required - set(b.props))))

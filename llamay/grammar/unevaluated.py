"""`unevaluatedProperties` next to `allOf` and `$ref`, made static.

An object's unevaluated properties are those no subschema that applies to it in place
evaluated: its own `properties` and `patternProperties`, and those of every `allOf` member
and `$ref` target, recursively (`additionalProperties` anywhere among them evaluates every
property). When every in-place applicator is of that kind (no `anyOf`, `oneOf`, `if`,
`dependentSchemas`, ..., whose evaluation depends on the instance), the set is known before
any value is: `unevaluatedProperties` is then `additionalProperties` over the object's own
properties extended with the members' names. That is the common shape (a definition
extended with `allOf: [{"$ref": base}]` and closed with `unevaluatedProperties: false`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Evaluated", "static_evaluated"]

# In-place applicators whose evaluated properties depend on the instance.
DYNAMIC = ("anyOf", "oneOf", "if", "not", "dependentSchemas", "dependencies", "$dynamicRef", "$recursiveRef")
MAX_MEMBERS = 256  # subschemas looked at, at most (references may form long chains)


@dataclass(frozen=True)
class Evaluated:
    """What the in-place subschemas evaluate: property `names` and `patterns`, or `every`
    property (an `additionalProperties` or `unevaluatedProperties` among them)."""

    names: frozenset[str] = frozenset()
    patterns: frozenset[str] = frozenset()
    every: bool = False


Resolve = Callable[[str, str], tuple[Any, str] | None]  # (ref, base) -> (schema, its base)


def static_evaluated(src: dict[str, Any], base: str, resolve: Resolve) -> Evaluated | None:
    """The properties `src`'s `allOf` members and `$ref` target evaluate (not `src`'s own),
    or None when that depends on the instance or a reference cannot be followed."""
    names: set[str] = set()
    patterns: set[str] = set()
    seen: set[int] = set()
    todo: list[tuple[Any, str]] = []

    def members(node: dict[str, Any], at: str) -> bool:
        for sub in node.get("allOf", []):
            todo.append((sub, at))
        ref = node.get("$ref")
        if ref is not None:
            if not isinstance(ref, str):
                return False
            found = resolve(ref, at)
            if found is None:
                return False
            todo.append(found)
        return True

    if any(k in src for k in DYNAMIC) or not members(src, base):
        return None
    while todo:
        node, at = todo.pop()
        if node is True or node == {}:
            continue
        if not isinstance(node, dict) or len(seen) >= MAX_MEMBERS:
            return None
        if id(node) in seen:  # met before (a shared definition, or a cycle): counted once
            continue
        seen.add(id(node))
        if any(k in node for k in DYNAMIC):
            return None
        if "additionalProperties" in node or "unevaluatedProperties" in node:
            return Evaluated(every=True)
        props = node.get("properties", {})
        pats = node.get("patternProperties", {})
        if not isinstance(props, dict) or not isinstance(pats, dict):
            return None
        names.update(props)
        patterns.update(pats)
        if not members(node, at):
            return None
    return Evaluated(frozenset(names), frozenset(patterns))

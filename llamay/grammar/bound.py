"""An upper bound on the bytes of any text a compiled JSON schema grammar can generate.

`max_bytes(schema, layout)` works on the compiled 2020-12 schema (.schema) and returns
None when the schema allows texts of any length. Each bound over-counts on purpose:

- every whitespace gap takes the layout's widest run (`shape.GAP_BYTES`): an object of n
  members has at most 4n+2 gaps, an array of n items 2n+2, and there is none around the
  top-level value;
- a string character takes up to 6 bytes (UTF-8 needs 4, a short escape 2; `\\u` escapes
  are never generated), so a string of maxLength n takes at most 2 + 6n bytes;
- an integer takes the digits of its wider bound plus a sign; other numbers are
  unbounded unless listed by const/enum;
- allOf takes the smallest member bound (a text satisfies each member), anyOf/oneOf the
  largest branch, and the keywords beside them cap both.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any

from .shape import GAP_BYTES, KEY_SEP_BYTES, Layout

__all__ = ["max_bytes"]

_CHAR = 6
_TYPES = ("null", "boolean", "object", "array", "integer", "number", "string")
# Longest value of a format, in characters (formats without one are unbounded).
_FORMAT_CHARS = {"uuid": 36, "date": 10, "ipv4": 15, "ipv6": 45, "hostname": 253}


def max_bytes(schema: Any, layout: Layout) -> int | None:
    """Upper bound on the UTF-8 length of any text `schema` (with `$defs` at its top)
    generates in `layout`, or None if unbounded."""
    defs = schema.get("$defs", {}) if isinstance(schema, dict) else {}
    return _Bound(defs, layout).of(schema, frozenset())


class _Bound:
    def __init__(self, defs: dict[str, Any], layout: Layout) -> None:
        self.defs = defs
        self.gap = GAP_BYTES[layout]
        self.key_sep = KEY_SEP_BYTES[layout]

    def of(self, schema: Any, active: frozenset[str]) -> int | None:
        if schema is False:
            return 0
        if not isinstance(schema, dict):
            return None
        caps: list[int | None] = [self.typed(schema, active)]
        for sub in schema.get("allOf", []):
            caps.append(self.of(sub, active))
        for key in ("anyOf", "oneOf"):
            if key in schema:
                branches = [self.of(s, active) for s in schema[key]]
                caps.append(None if None in branches else max(b for b in branches if b is not None))
        ref = schema.get("$ref")
        if isinstance(ref, str):
            name = ref.removeprefix("#/$defs/")
            if name not in active and name in self.defs:
                caps.append(self.of(self.defs[name], active | {name}))
        known = [c for c in caps if c is not None]
        return min(known) if known else None

    def typed(self, node: dict[str, Any], active: frozenset[str]) -> int | None:
        """Bound from the node's own keywords (no applicators)."""
        if "const" in node:
            return self.literal(node["const"])
        if isinstance(node.get("enum"), list):
            return max((self.literal(v) for v in node["enum"]), default=0)
        declared = node.get("type")
        if declared is None:
            return None
        types = [declared] if isinstance(declared, str) else list(declared)
        sizes = [self.of_type(t, node, active) for t in types]
        return None if None in sizes or not sizes else max(s for s in sizes if s is not None)

    def of_type(self, kind: str, node: dict[str, Any], active: frozenset[str]) -> int | None:
        if kind == "null":
            return 4
        if kind == "boolean":
            return 5
        if kind == "integer":
            return _integer(node)
        if kind == "string":
            caps = []
            if isinstance(node.get("maxLength"), int):
                caps.append(2 + _CHAR * node["maxLength"])
            if node.get("format") in _FORMAT_CHARS:
                caps.append(2 + _CHAR * _FORMAT_CHARS[node["format"]])
            return min(caps) if caps else None
        if kind == "array":
            return self.array(node, active)
        if kind == "object":
            return self.object(node, active)
        return None  # number: decimals of any length

    def array(self, node: dict[str, Any], active: frozenset[str]) -> int | None:
        prefix = node.get("prefixItems", [])
        count = node.get("maxItems")
        if node.get("items") is False:
            count = len(prefix) if count is None else min(count, len(prefix))
        if not isinstance(count, int):
            return None
        schemas = list(prefix[:count])
        if count > len(prefix):
            schemas.append(node.get("items", True))
        sizes = [self.of(s, active) for s in schemas]
        if None in sizes:
            return None
        item = max((s for s in sizes if s is not None), default=0)
        return 2 + count * (item + 1) + (2 * count + 2) * self.gap

    def object(self, node: dict[str, Any], active: frozenset[str]) -> int | None:
        props = node.get("properties", {})
        if node.get("maxProperties") == 0:
            return 2 + self.gap
        if node.get("additionalProperties") is not False or node.get("patternProperties"):
            return None
        total = 2 + (4 * len(props) + 2) * self.gap
        for key, sub in props.items():
            size = self.of(sub, active)
            if size is None:
                return None
            total += len(json.dumps(key, ensure_ascii=False).encode()) + self.key_sep + 1 + size
        return total

    def literal(self, value: Any) -> int:
        """Bytes of `value` written with the widest gaps (numbers in either notation)."""
        if isinstance(value, dict):
            inner = sum(
                len(json.dumps(k, ensure_ascii=False).encode()) + self.key_sep + 1 + self.literal(v)
                for k, v in value.items()
            )
            return 2 + inner + (4 * len(value) + 2) * self.gap
        if isinstance(value, list):
            return 2 + sum(self.literal(v) + 1 for v in value) + (2 * len(value) + 2) * self.gap
        if isinstance(value, float) and math.isfinite(value):
            return max(len(json.dumps(value)), len(f"{Decimal(repr(value)):f}")) + 2
        return len(json.dumps(value, ensure_ascii=False).encode())


def _integer(node: dict[str, Any]) -> int | None:
    lows = [node[k] for k in ("minimum", "exclusiveMinimum") if _finite(node.get(k))]
    highs = [node[k] for k in ("maximum", "exclusiveMaximum") if _finite(node.get(k))]
    if not lows or not highs:
        return None
    lo, hi = math.floor(max(lows)), math.ceil(min(highs))
    return max(len(str(lo)), len(str(hi)), 2)


def _finite(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)

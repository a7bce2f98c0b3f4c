"""JSON schema -> llguidance grammar, refusing whatever cannot be enforced while sampling.

llguidance compiles JSON schemas itself and already errors on the keywords it has not
implemented, but (as JSON Schema allows) it silently ignores keywords it does not know,
its errors carry no location, and a few of its behaviours would let generated text
violate the schema. So every schema is first walked here: each keyword is either
enforced (and its subschemas walked), a pure annotation, or refused with a SchemaError
naming the keyword and its JSON pointer (see .keywords for the vocabulary). Only then is
it handed to llguidance, with the options of `keywords.JSON_OPTIONS`.

Object properties are generated in schema order (llguidance's rule): every valid value
stays reachable, just not in every key order.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import GrammarError
from .keywords import (
    ANNOTATIONS,
    COUNTS,
    DIALECTS,
    ENFORCED,
    FORMAT_FIXES,
    FORMATS,
    JSON_OPTIONS,
    LIST,
    MAP,
    SINGLE,
    UNSUPPORTED,
)

__all__ = [
    "SchemaError",
    "PreparedSchema",
    "prepare_schema",
    "schema_lark",
    "compile_error",
    "PARAM",
]

PARAM = "response_format"
MAX_DEPTH = 128
_DROP = object()  # marks a keyword removed in non-strict mode


class SchemaError(GrammarError):
    """A JSON schema the compiler refuses. `keyword` is the JSON schema keyword at fault
    (or "false" for a schema that accepts nothing), `path` its JSON pointer."""

    def __init__(self, message: str, *, keyword: str, path: str) -> None:
        super().__init__(message, param=PARAM)
        self.keyword = keyword
        self.path = path


@dataclass
class PreparedSchema:
    """A checked copy of the caller's schema, ready for llguidance. `ignored` lists the
    keywords dropped in non-strict mode as "keyword at /path"."""

    schema: dict[str, Any]
    ignored: list[str] = field(default_factory=list)


def _pointer(path: str, *parts: str | int) -> str:
    for p in parts:
        path += "/" + str(p).replace("~", "~0").replace("/", "~1")
    return path


def _fail(
    keyword: str, path: str, reason: str = "", what: str = "unsupported JSON schema keyword"
) -> SchemaError:
    where = path or "/"
    message = f"{what} '{keyword}' at {where}" + (f": {reason}" if reason else "")
    return SchemaError(message, keyword=keyword, path=where)


def prepare_schema(schema: Any, *, strict: bool = True) -> PreparedSchema:
    """Check and normalise `schema`; raise SchemaError for anything not enforceable.

    With `strict=False`, keywords that only narrow the valid set (and so can be dropped
    leaving a looser but still honest constraint) are removed and listed in `ignored`
    instead of refused; malformed schemas are refused either way.
    """
    if schema is True:
        schema = {}
    if schema is False:
        raise SchemaError("unsatisfiable JSON schema at /: boolean schema 'false'", keyword="false", path="/")
    if not isinstance(schema, dict):
        raise SchemaError("a JSON schema must be an object or a boolean", keyword="type", path="/")
    if "x-guidance" in schema:
        # These options decide soundness (see JSON_OPTIONS); callers may not change them.
        raise _fail("x-guidance", "", "llamay fixes these options itself")
    prepared = PreparedSchema(schema={})
    prepared.schema = _walk(schema, "", strict, prepared.ignored, 0)
    return prepared


def _walk(node: Any, path: str, strict: bool, ignored: list[str], depth: int) -> Any:
    """Return a checked copy of the subschema `node` at JSON pointer `path`."""
    if isinstance(node, bool):
        return node
    if not isinstance(node, dict):
        raise SchemaError(f"invalid JSON schema at {path or '/'}: expected an object or a boolean",
                          keyword="type", path=path or "/")  # fmt: skip
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "$schema" and _dialect(value) not in DIALECTS:
            # Another dialect or a custom metaschema may give keywords other meanings.
            raise _fail(key, path, f"dialect {json.dumps(value)} is not supported; use draft 2020-12")
        if key in ANNOTATIONS or key.startswith("x-"):
            out[key] = value
        elif key in ENFORCED:
            checked = _enforced(key, value, node, path, strict, ignored, depth)
            if checked is not _DROP:
                out[key] = checked
        elif key == "uniqueItems" and _unique_is_noop(node):
            continue  # false, or at most one item: nothing to enforce
        elif strict:
            if key in UNSUPPORTED:
                raise _fail(key, path, UNSUPPORTED[key])
            # Unknown keywords are annotations to JSON Schema, but here a typo such as
            # "minLenght" would silently drop a constraint the caller asked for.
            raise _fail(key, path, "unknown keywords are refused, not ignored", "unknown JSON schema keyword")
        else:
            ignored.append(f"{key} at {path or '/'}")
    _check_min_properties(out, path)
    fix = FORMAT_FIXES.get(out.get("format", ""))
    if fix is not None:
        out["allOf"] = [*out.get("allOf", []), fix]
    return out


def _is_schema(value: Any) -> bool:
    return isinstance(value, dict | bool)


def _dialect(uri: Any) -> str:
    return str(uri).removeprefix("https://").removeprefix("http://").rstrip("#")


def _unique_is_noop(node: dict[str, Any]) -> bool:
    max_items = node.get("maxItems")
    return node.get("uniqueItems") is False or (isinstance(max_items, int | float) and max_items <= 1)


def _enforced(key: str, value: Any, node: dict[str, Any], path: str, strict: bool,
              ignored: list[str], depth: int) -> Any:  # fmt: skip
    here = _pointer(path, key)
    shape = ENFORCED[key]
    if shape is not None and depth >= MAX_DEPTH:
        raise _fail(
            key, path, f"subschemas may nest at most {MAX_DEPTH} deep", "JSON schema too deep at keyword"
        )
    if shape == SINGLE:
        if not _is_schema(value):
            hint = " (for tuples use prefixItems)" if key == "items" else ""
            raise _fail(key, path, "must be a schema" + hint, "invalid JSON schema keyword")
        return _walk(value, here, strict, ignored, depth + 1)
    if shape == MAP:
        if not isinstance(value, dict) or not all(map(_is_schema, value.values())):
            raise _fail(key, path, "must map names to schemas", "invalid JSON schema keyword")
        return {k: _walk(v, _pointer(here, k), strict, ignored, depth + 1) for k, v in value.items()}
    if shape == LIST:
        ok = isinstance(value, list) and (value or key == "prefixItems") and all(map(_is_schema, value))
        if not ok:
            raise _fail(key, path, "must be a non-empty list of schemas", "invalid JSON schema keyword")
        return [_walk(v, _pointer(here, i), strict, ignored, depth + 1) for i, v in enumerate(value)]
    if key in COUNTS:
        return _count(key, value, path)
    if key == "format":
        if value not in FORMATS:
            if strict:
                raise _fail(key, path, f"format {json.dumps(value)} cannot be enforced")
            ignored.append(f"format at {path or '/'}")
            return _DROP
        return value
    if key in ("const", "enum"):
        _check_literals(key, [value] if key == "const" else value, path)
    return value


def _count(key: str, value: Any, path: str) -> int:
    # 2.0 is a valid count in JSON Schema; llguidance wants a JSON integer.
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _fail(key, path, "must be a non-negative integer", "invalid JSON schema keyword")
    return value


def _check_literals(key: str, values: Any, path: str) -> None:
    if not isinstance(values, list):
        raise _fail(key, path, "must be a list", "invalid JSON schema keyword")
    if not values:
        raise _fail(key, path, "an empty enum accepts nothing", "unsatisfiable JSON schema keyword")
    stack = list(values)
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if any(ord(c) < 0x20 and c not in "\b\f\n\r\t" for c in v):
                raise _fail(
                    key,
                    path,
                    "a string with a control character other than \\b\\f\\n\\r\\t cannot be generated",
                )
        elif isinstance(v, float) and not math.isfinite(v):
            raise _fail(key, path, "non-finite number", "invalid JSON schema keyword")
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)


def _check_min_properties(node: dict[str, Any], path: str) -> None:
    # llguidance counts keys as written but does not keep additional keys distinct, so
    # `{"k":1,"k":2}` would count as two properties yet parse as one. Safe only while at
    # most one key beyond the distinct required ones is needed.
    minimum = node.get("minProperties")
    required = node.get("required")
    n_required = len(set(required)) if isinstance(required, list) else 0
    if isinstance(minimum, int) and minimum - n_required >= 2:
        raise _fail(
            "minProperties",
            path,
            "needs two or more keys beyond 'required', and generated additional keys may repeat",
        )


def schema_lark(schema: dict[str, Any], *, coerce_one_of: bool = False) -> str:
    """The Lark grammar (llguidance dialect) generating exactly the JSON texts chosen by
    `schema`, a result of `prepare_schema`, under JSON_OPTIONS."""
    options = dict(JSON_OPTIONS, coerce_one_of=coerce_one_of)
    return "start: %json " + json.dumps({**schema, "x-guidance": options}, ensure_ascii=False)


# llguidance's compile errors name no location; map each to the keyword at fault. Order
# matters: the first needle found in the message wins.
_ERROR_KEYWORDS = (
    ("oneOf", "oneOf"),
    ("patternProperty", "patternProperties"),
    ("min/maxProperties", "minProperties"),
    ("Unknown format", "format"),
    ("Resource ", "$ref"),
    ("anyOf is empty", "anyOf"),
    ("schema is false", "false"),
)


def compile_error(message: str) -> SchemaError:
    """Turn an llguidance JSON compile error into a SchemaError naming a keyword."""
    lines = message.strip().splitlines() or ["schema error"]
    # The first line reads "at 1(8): failed to compile JSON schema: <reason>" (the
    # position is in our Lark wrapper); the rest echoes the grammar source.
    reason = lines[0].split("failed to compile JSON schema: ", 1)[-1]
    path = "/"
    for line in lines:
        if "json-schema:///#" in line:
            path = line.split("json-schema:///#", 1)[1].split()[0] or "/"
    keyword = next((kw for needle, kw in _ERROR_KEYWORDS if needle in reason), None)
    if keyword is None:
        quoted = re.findall(r"""['"]([$A-Za-z]+)['"]""", reason)
        known = [k for k in quoted if k in ENFORCED or k in UNSUPPORTED]
        keyword = known[0] if known else "type"  # e.g. an empty intersection of types
    return SchemaError(f"JSON schema keyword '{keyword}' at {path} cannot be enforced: {reason}",
                       keyword=keyword, path=path)  # fmt: skip

"""Arguments written one parameter at a time (Qwen3-Coder's `<parameter=k>`, GLM's
`<arg_value>`, MiniMax's `<parameter name="k">`, LFM2's `k=v`): each value's text to JSON
by its schema when parsing, and each value's grammar when constraining.

The templates write a string value as its bare text and anything else as JSON, so a
value of a string-only parameter is its text (one newline on each side, the way
Qwen3-Coder lays them out, is not part of it); any other value is JSON when it parses
and a string when it does not (nullable strings and unions included).

Constrained, a bare text ends only where the model writes the closing tag, which a model
with no sense of the format (random weights, say) may never do. So a forced call writes
a string value as a JSON string (decoded again by the parser: a string parameter's value
that is exactly one JSON string literal is that string), where every string keyword is
enforced; a lazily triggered call, where the model chose to call, may also write the
bare text its template shows. Enumerated strings are their bare literals either way.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from .base import lit
from .program import Call, Lit, Mismatch, Opt, Program, Text, Until
from .spec import ToolSpec, json_rule

__all__ = [
    "VALUE_LIMIT",
    "param_json",
    "param_schemas",
    "params_rule",
    "string_only",
    "tagged_params",
    "value_rule",
]

# A parameter name is short; a value is bounded only by the output itself.
NAME_LIMIT = 256
VALUE_LIMIT = 1 << 30


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def param_schemas(tool: ToolSpec) -> dict[str, Any]:
    """Parameter name -> its schema (properties of the tool's object schema)."""
    props = tool.parameters.get("properties")
    return dict(props) if isinstance(props, Mapping) else {}


def string_only(schema: Any) -> bool:
    """The schema admits strings and nothing else (by `type`, or an `enum`/`const` of
    strings without one)."""
    if not isinstance(schema, Mapping):
        return False
    kind = schema.get("type")
    if kind == "string" or kind == ["string"]:
        return True
    if kind is None:
        if "const" in schema:
            return isinstance(schema["const"], str)
        enum = schema.get("enum")
        return isinstance(enum, list) and bool(enum) and all(isinstance(v, str) for v in enum)
    return False


def param_json(raw: str, schema: Any) -> str:
    """The JSON text of one parameter's value as the model wrote it (see the module
    docstring); `schema` None for a parameter the tool does not declare."""
    text = raw[1:] if raw.startswith("\n") else raw
    text = text[:-1] if text.endswith("\n") else text
    if string_only(schema):
        stripped = text.strip()
        if len(stripped) >= 2 and stripped[0] == stripped[-1] == '"':
            try:
                value = json.loads(stripped, parse_constant=_reject_constant)
                if isinstance(value, str):
                    return json.dumps(value, ensure_ascii=False)
            except ValueError:
                pass
        return json.dumps(text, ensure_ascii=False)
    stripped = text.strip()
    try:
        value = json.loads(stripped, parse_constant=_reject_constant)
        if not (isinstance(value, float) and not math.isfinite(value)):
            return stripped
    except (ValueError, RecursionError):
        pass
    return json.dumps(text, ensure_ascii=False)


def _sub_schema(prop: Any, root: Mapping[str, Any]) -> dict[str, Any]:
    """A parameter's schema as a root of its own: the tool's definitions come along so
    its `$ref`s still resolve."""
    sub = dict(prop) if isinstance(prop, Mapping) else {}
    for key in ("$defs", "definitions"):
        if key in root and key not in sub:
            sub[key] = root[key]
    return sub


def json_value_rule(prop: Any, root: Mapping[str, Any]) -> str:
    """Lark for one JSON value of schema `prop` (`root`: the tool's whole schema)."""
    return json_rule(json.dumps(_sub_schema(prop, root)), strict=True)


def value_rule(prop: Any, root: Mapping[str, Any], *, end: str, raw: str, forced: bool) -> str:
    """Lark for one value of schema `prop` followed by `end` (the Lark of what closes
    it); `raw` is Lark for any bare text up to and including that close; `root` the
    tool's whole schema (for its definitions)."""
    if string_only(prop):
        values = [prop["const"]] if "const" in prop else prop.get("enum")
        if isinstance(values, list) and values:
            return "(" + " | ".join(lit(v) for v in values) + f") {end}"
        quoted = f"{json_rule(json.dumps(_sub_schema(prop, root)), strict=True)} {end}"
        plain = set(prop) <= {"type", "description", "title", "examples", "default", "$comment"}
        if forced or not plain:
            return quoted
        return f"({raw} | {quoted})"
    return f"{json_rule(json.dumps(_sub_schema(prop, root)), strict=True)} {end}"


def params_rule(
    tool: ToolSpec,
    one: Callable[[str, Any], str],
    *,
    add: Callable[[str, str], str] | None = None,
    prefix: str = "",
    separator: str = "",
) -> str:
    """Lark for a tool's parameters in schema order: `one(name, schema)` each, the
    required ones always, the others optional; '""' when there are none. Names the
    schema lists as required without a schema take any JSON value. With `separator`
    (Lark) between two parameters, `add(name, body)` defines the helper rules, named
    from `prefix`."""
    props = param_schemas(tool)
    required = tool.parameters.get("required")
    required = [r for r in required if isinstance(r, str)] if isinstance(required, list) else []
    for name in required:
        props.setdefault(name, {})
    if not props:
        return '""'
    items = [(one(name, prop), name in required) for name, prop in props.items()]
    if not separator:
        return " ".join(piece if need else f"({piece})?" for piece, need in items)
    assert add is not None
    # rest(i, started): parameters i.. after `started` ones; a separator only between two.
    names: dict[tuple[int, bool], str] = {}
    for i in range(len(items), -1, -1):
        for started in (False, True):
            name = f"{prefix}_{i}_{int(started)}"
            if i == len(items):
                body = '""'
            else:
                piece, need = items[i]
                here = f"{separator} {piece}" if started else piece
                body = f"{here} {names[(i + 1, True)]}"
                if not need:
                    body = f"({body}) | {names[(i + 1, started)]}"
            names[(i, started)] = add(name, body)
    return names[(0, False)]


class _StringValue:
    """A string parameter's value, passed on as it streams: `"key": "` and the escaped
    text, holding back a trailing newline (the layout's, if the closing tag follows).
    A value that starts with a quote may be one JSON string literal (a forced call
    writes those), so it is kept whole and converted at its end like any value."""

    def __init__(self, call: Call, head: str, schema: Any) -> None:
        self.call = call
        self.head = head  # `, "key": ` (without the value)
        self.schema = schema
        self.seen: list[str] = []  # the text as written, until streaming starts
        self.mode = "start"  # start | stream | keep
        self.held = ""

    def __call__(self, text: str) -> None:
        if self.mode == "keep":
            self.seen.append(text)
            return
        if self.mode == "start":
            self.seen.append(text)
            seen = "".join(self.seen)
            view = seen[1:] if seen.startswith("\n") else seen  # the layout's leading newline
            if not view:
                return
            if view.startswith('"'):
                self.mode = "keep"
                return
            self.mode, text = "stream", view
            self.call.args(self.head + '"')
        text = self.held + text
        self.held = "\n" if text.endswith("\n") else ""
        if len(text) > len(self.held):
            self.call.args(json.dumps(text[: len(text) - len(self.held)], ensure_ascii=False)[1:-1])

    def end(self) -> None:
        """The closing tag came: finish the value (the held newline was the layout's)."""
        if self.mode == "stream":
            self.call.args('"')
        else:
            self.call.args(self.head + param_json("".join(self.seen), self.schema))


def tagged_params(
    call: Call,
    schemas: Mapping[str, Any],
    opens: str,
    name_end: str,
    value_end: str,
    end: str,
    *,
    opened: bool = False,
    value_open: str = "",
) -> Program:
    """Parse `opens NAME name_end [value_open] VALUE value_end` parameters until `end`
    (`opened`: the first `opens` was already read), passing the call's arguments on as
    a JSON object: a string parameter's text as it streams, any other value at its end.
    When the parameters break off, the arguments are closed where they stop and the
    mismatch propagates (the caller gives the text back)."""
    first = True
    call.args("{")
    try:
        while True:
            tag = opens if opened else (yield Opt([opens, end]))
            opened = False
            if tag is None:
                raise Mismatch()
            if tag == end:
                break
            key, _ = yield Until([name_end], NAME_LIMIT)
            if value_open:
                yield Lit(value_open)
            head = f"{'' if first else ', '}{json.dumps(key, ensure_ascii=False)}: "
            schema = schemas.get(key)
            if string_only(schema):
                value = _StringValue(call, head, schema)
                if (yield Text([value_end], value)) is None:
                    return  # cut off inside the value
                value.end()
            else:
                raw, _ = yield Until([value_end], VALUE_LIMIT)
                call.args(head + param_json(raw, schema))
            first = False
    except Mismatch:
        call.args("}")
        raise
    call.args("}")

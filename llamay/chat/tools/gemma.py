"""Gemma 4's tool calls: `<|tool_call>call:NAME{key:value,...}<tool_call|>`, one block per
call, parallel calls back to back; the model then writes `<|tool_response>` and waits for
the results.

The arguments are not JSON but the template's own notation (`format_argument` in
google-gemma-4-*.jinja): keys bare (`city:`), strings between `<|"|>` quotes with nothing
escaped, numbers, `true`/`false`/`null` and nested `{...}` / `[...]` as JSON writes them,
no whitespace; the template writes a call's keys sorted. `gemma_json` reads that notation
into JSON; the grammar writes a tool's schema in it (`_Notation`): properties in sorted
order, strings quoted (their `minLength`/`maxLength`, an anchored `pattern`, enums and consts kept), integers
(a small `minimum`..`maximum` range kept), numbers, booleans, arrays and unions by their
schema, anything else (a `$ref`, other bounds) as any value of the notation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from .base import LarkRules, Special, TemplateFormat, ToolPlan, chosen_tools, lit, marked_plan, marker
from .block import CallSyntax
from .params import NAME_LIMIT, VALUE_LIMIT
from .program import BlockIO, Lit, Mismatch, Opt, Program, Until
from .spec import ToolChoice, ToolSpec
from .stream import ToolStreamParser

__all__ = ["GemmaFormat", "gemma_json", "OPEN", "CLOSE", "QUOTE"]

OPEN, CLOSE, QUOTE, RESPONSE = "<|tool_call>", "<tool_call|>", '<|"|>', "<|tool_response>"
MAX_DEPTH = 64  # nesting of the arguments' objects and arrays
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")
_WORDS = {"true": True, "false": False, "null": None}


def gemma_json(text: str) -> str:
    """The JSON text of one value in Gemma's notation (`text` holds it and nothing else
    but whitespace); ValueError when it is not one."""
    value, end = _value(text, 0, 0)
    if text[end:].strip():
        raise ValueError(f"text after the value at {end}")
    return json.dumps(value, ensure_ascii=False)


def _value(text: str, i: int, depth: int) -> tuple[Any, int]:
    if depth > MAX_DEPTH:
        raise ValueError("nested too deeply")
    if text.startswith(QUOTE, i):
        end = text.find(QUOTE, i + len(QUOTE))
        if end < 0:
            raise ValueError("unterminated string")
        return text[i + len(QUOTE) : end], end + len(QUOTE)
    if text.startswith("{", i):
        return _object(text, i + 1, depth)
    if text.startswith("[", i):
        return _array(text, i + 1, depth)
    for word, value in _WORDS.items():
        if text.startswith(word, i):
            return value, i + len(word)
    m = _NUMBER.match(text, i)
    if m is None:
        raise ValueError(f"no value at {i}")
    number = m.group()
    return (float(number) if any(c in number for c in ".eE") else int(number)), m.end()


def _object(text: str, i: int, depth: int) -> tuple[dict[str, Any], int]:
    out: dict[str, Any] = {}
    if text.startswith("}", i):
        return out, i + 1
    while True:
        if text.startswith(QUOTE, i):  # the template quotes keys inside declarations
            key, i = _value(text, i, depth + 1)
        else:
            colon = text.find(":", i, i + NAME_LIMIT + 1)
            if colon < 0:
                raise ValueError(f"no key at {i}")
            key, i = text[i:colon].strip(), colon
        if not text.startswith(":", i):
            raise ValueError(f"no ':' at {i}")
        out[key], i = _value(text, i + 1, depth + 1)
        if text.startswith(",", i):
            i += 1
        elif text.startswith("}", i):
            return out, i + 1
        else:
            raise ValueError(f"no ',' or '}}' at {i}")


def _array(text: str, i: int, depth: int) -> tuple[list[Any], int]:
    out: list[Any] = []
    if text.startswith("]", i):
        return out, i + 1
    while True:
        value, i = _value(text, i, depth + 1)
        out.append(value)
        if text.startswith(",", i):
            i += 1
        elif text.startswith("]", i):
            return out, i + 1
        else:
            raise ValueError(f"no ',' or ']' at {i}")


def _program(io: BlockIO, opener: str) -> Program:
    yield Lit("call:")
    name, _ = yield Until(["{"], NAME_LIMIT)
    call = io.call(name.strip())
    body, _ = yield Until([CLOSE], VALUE_LIMIT)
    try:
        arguments = gemma_json("{" + body)
    except (ValueError, RecursionError) as e:
        raise Mismatch() from e
    if not isinstance(json.loads(arguments), dict):
        raise Mismatch()
    call.args(arguments)
    if not call.known:  # not a tool of the request: its text is content
        io.content(opener + io.raw)
    yield Opt([RESPONSE])


class _Notation:
    """Lark rules for values of a JSON schema in Gemma's notation."""

    def __init__(self, rules: LarkRules, quote: str) -> None:
        self.rules = rules
        self.quote = quote  # the quote's Lark (its token when the vocabulary has one)
        self.count = 0

    def any(self) -> str:
        q = self.quote
        r = self.rules
        r.add("g_key", "/[A-Za-z_][A-Za-z0-9_]{0,63}/")
        r.add("g_str", f"{q} /[^<]{{0,256}}/ {q}")
        r.add("g_num", "/-?(0|[1-9][0-9]{0,15})(\\.[0-9]{1,16})?/")
        r.add("g_pair", 'g_key ":" g_any')
        r.add("g_obj", '"{" (g_pair ("," g_pair)*)? "}"')
        r.add("g_arr", '"[" (g_any ("," g_any)*)? "]"')
        return r.add("g_any", 'g_str | g_num | "true" | "false" | "null" | g_obj | g_arr')

    def literal(self, value: Any) -> str:
        """A constant value as the template writes it (`format_argument`)."""
        if isinstance(value, str):
            return f"{self.quote} {lit(value)} {self.quote}" if value else f"{self.quote} {self.quote}"
        if isinstance(value, bool) or value is None:
            return lit(json.dumps(value))
        if isinstance(value, int | float):
            return lit(json.dumps(value))
        if isinstance(value, Mapping):
            pairs = [f'{lit(str(k))} ":" {self.literal(v)}' for k, v in sorted(value.items())]
            return '"{" ' + ' "," '.join(pairs) + ' "}"' if pairs else '"{" "}"'
        if isinstance(value, list):
            items = [self.literal(v) for v in value]
            return '"[" ' + ' "," '.join(items) + ' "]"' if items else '"[" "]"'
        return self.any()

    def value(self, schema: Any) -> str:
        if not isinstance(schema, Mapping):
            return self.any()
        if "const" in schema:
            return self.literal(schema["const"])
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return "(" + " | ".join(self.literal(v) for v in schema["enum"]) + ")"
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list) and schema[key]:
                return "(" + " | ".join(self.value(s) for s in schema[key]) + ")"
        kind = schema.get("type")
        if isinstance(kind, list) and kind:
            return "(" + " | ".join(self.value({**schema, "type": k}) for k in kind) + ")"
        return self._typed(kind, schema)

    def _typed(self, kind: Any, schema: Mapping[str, Any]) -> str:
        if kind == "string":
            pattern = schema.get("pattern")
            if isinstance(pattern, str) and pattern.startswith("^") and pattern.endswith("$"):
                body = pattern[1:-1].replace("/", "\\/")
                return f"{self.quote} /(?:{body})/ {self.quote}"
            if "pattern" in schema or "format" in schema:
                return self.rules.add("g_str_any", f"{self.quote} /[^<]*/ {self.quote}")
            low, high = schema.get("minLength", 0), schema.get("maxLength")
            low = low if isinstance(low, int) and low >= 0 else 0
            span = f"{{{low},{high}}}" if isinstance(high, int) and high >= low else f"{{{low},}}"
            return f"{self.quote} /(?s:[^<]{span})/ {self.quote}"
        if kind == "integer":
            low, high = schema.get("minimum"), schema.get("maximum")
            if isinstance(low, int) and isinstance(high, int) and 0 <= high - low < 256:
                return "(" + " | ".join(lit(str(n)) for n in range(low, high + 1)) + ")"
            return self.rules.add("g_int", "/-?(0|[1-9][0-9]{0,15})/")
        if kind == "number":
            self.any()
            return "g_num"
        if kind == "boolean":
            return '("true" | "false")'
        if kind == "null":
            return '"null"'
        if kind == "array":
            item = self.value(schema.get("items")) if isinstance(schema.get("items"), Mapping) else self.any()
            self.count += 1
            return self.rules.add(f"g_list_{self.count}", f'"[" ({item} ("," {item})*)? "]"')
        if kind == "object" or (kind is None and "properties" in schema):
            return self.object(schema)
        return self.any()

    def object(self, schema: Mapping[str, Any], *, top: bool = False) -> str:
        """`{key:value,...}`: the schema's properties in sorted order, the required ones
        always. Without properties: any keys, but for a call's arguments (`top`) that do
        not ask for other keys (`additionalProperties`), nothing."""
        props = schema.get("properties")
        if not isinstance(props, Mapping) or not props:
            extra = schema.get("additionalProperties")
            if schema.get("additionalProperties") is False or (top and not extra):
                return '"{" "}"'
            self.any()
            return "g_obj"
        required = schema.get("required")
        need = set(required) if isinstance(required, list) else set()
        items = [(f'{lit(str(k))} ":" {self.value(v)}', k in need) for k, v in sorted(props.items())]
        self.count += 1
        prefix = f"g_o{self.count}"
        # rest(i, started): properties i.. after `started` ones, a comma between two.
        names: dict[tuple[int, bool], str] = {}
        for i in range(len(items), -1, -1):
            for started in (False, True):
                if i == len(items):
                    body = '""'
                else:
                    piece, needed = items[i]
                    here = f'"," {piece}' if started else piece
                    body = f"{here} {names[(i + 1, True)]}"
                    if not needed:
                        body = f"({body}) | {names[(i + 1, started)]}"
                names[(i, started)] = self.rules.add(f"{prefix}_{i}_{int(started)}", body)
        return f'"{{" {names[(0, False)]} "}}"'


class GemmaFormat(TemplateFormat):
    """Gemma 4's `<|tool_call>call:NAME{...}<tool_call|>` blocks."""

    name = "gemma4"

    def plan(self, tools: list[ToolSpec], choice: ToolChoice, parallel: bool, special: Special) -> ToolPlan:
        rules = LarkRules()
        notation = _Notation(rules, marker(QUOTE, special))
        alts = []
        for i, tool in enumerate(chosen_tools(tools, choice)):
            args = notation.object(tool.parameters, top=True)
            alts.append(rules.add(f"call_{i}", f'"call:" {lit(tool.name)} {args}'))
        close = marker(CLOSE, special)
        call = "(" + " | ".join(alts) + ")"
        body = f"{call} {close}"
        if parallel:
            body += f" ({marker(OPEN, special)} {call} {close})*"
        return marked_plan(rules, body, OPEN, special, choice.forced)

    def parser(self, tools: list[ToolSpec], finish_tool: str | None = None) -> ToolStreamParser:
        return ToolStreamParser(CallSyntax(openers=((OPEN, ""),), program=_program), tools, finish_tool)

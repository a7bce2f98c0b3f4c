"""Validated tool definitions and tool choice, from OpenAI-shaped request fields.

`parse_tools` and `parse_tool_choice` run at request validation time and raise
InvalidRequest (GrammarError for schemas) naming the exact field at fault, so nothing
later (planning, generation, parsing) has to re-check what the client sent.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeGuard

from ...errors import GrammarError, InvalidRequest
from ...grammar import Grammar
from ...grammar.shape import Layout

__all__ = [
    "FINISH_TOOL",
    "MAX_TOOLS",
    "ToolCall",
    "ToolChoice",
    "ToolSpec",
    "args_rule",
    "json_rule",
    "openai_tools",
    "parse_tool_choice",
    "parse_tools",
]

MAX_TOOLS = 128  # OpenAI's limit; every tool adds a grammar branch and prompt text
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
# Ollama takes any name ("weather.get", "web search"). A name reaches the grammar only as a
# JSON string (json.dumps, then a Lark literal), so any text is safe there; control
# characters are refused because no template or client expects them in a name.
MAX_LOOSE_NAME = 256


def _empty_object() -> dict[str, Any]:
    return {"type": "object", "properties": {}}


@dataclass(frozen=True)
class ToolSpec:
    """One callable function. `parameters` is the JSON schema of its arguments object,
    as the client sent it (templates render it verbatim). `strict` selects how the
    schema is enforced while generating: strict refuses keywords that cannot be
    enforced, non-strict drops them; requests always parse tools as strict."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=_empty_object)
    strict: bool = False


@dataclass(frozen=True)
class ToolChoice:
    """`mode` "auto" (the model decides), "none" (no calls), "required" (at least one
    call, any tool) or "function" (exactly the tool `name`)."""

    mode: Literal["auto", "none", "required", "function"]
    name: str | None = None

    @property
    def forced(self) -> bool:
        """The output must be tool calls from its first token."""
        return self.mode in ("required", "function")


@dataclass(frozen=True)
class ToolCall:
    """A completed call as the API reports it: `arguments` is a JSON text."""

    id: str
    name: str
    arguments: str


FINISH_TOOL = ToolSpec(
    "finish",
    "Call this when the task is done, with a summary of the answer for the user.",
    {
        "type": "object",
        "properties": {"summary": {"type": "string"}},
        "required": ["summary"],
        "additionalProperties": False,
    },
    strict=True,
)


def parse_tools(tools: Any, param: str = "tools", *, loose_names: bool = False) -> list[ToolSpec]:
    """Validate an OpenAI `tools` array: `[{"type": "function", "function": {"name",
    "description"?, "parameters"?, "strict"?}}]`. None means no tools. Names must be
    unique and match [A-Za-z0-9_-]{1,64} (OpenAI's rule), or with `loose_names` be 1 to
    MAX_LOOSE_NAME characters without control characters (Ollama's); each parameters
    schema must describe an object and compile (strictly when `strict` is true). Raises
    InvalidRequest (or GrammarError for a schema) whose `param` names the field, e.g.
    "tools[2].function.parameters"."""
    if tools is None:
        return []
    if isinstance(tools, str | bytes | Mapping) or not isinstance(tools, Sequence):
        raise InvalidRequest(f"{param} must be an array of tool objects", param=param)
    if len(tools) > MAX_TOOLS:
        raise InvalidRequest(f"{param} may hold at most {MAX_TOOLS} tools", param=param)
    specs: list[ToolSpec] = []
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        where = f"{param}[{i}]"
        spec = _parse_tool(tool, where, loose_names)
        if spec.name in seen:
            raise InvalidRequest(
                f"{where}.function.name: duplicate tool name {spec.name!r}", param=f"{where}.function.name"
            )
        seen.add(spec.name)
        specs.append(spec)
    return specs


def _name_ok(name: Any, loose: bool) -> TypeGuard[str]:
    if not isinstance(name, str):
        return False
    if not loose:
        return _NAME.fullmatch(name) is not None
    # Nor a lone surrogate (JSON can carry one; no UTF-8 text, so no prompt, can).
    return 0 < len(name) <= MAX_LOOSE_NAME and not any(unicodedata.category(c) in ("Cc", "Cs") for c in name)


def _parse_tool(tool: Any, where: str, loose_names: bool = False) -> ToolSpec:
    if not isinstance(tool, Mapping):
        raise InvalidRequest(f"{where} must be an object", param=where)
    if tool.get("type") != "function":
        raise InvalidRequest(f'{where}.type must be "function"', param=f"{where}.type")
    fn = tool.get("function")
    if not isinstance(fn, Mapping):
        raise InvalidRequest(f"{where}.function must be an object", param=f"{where}.function")
    name = fn.get("name")
    if not _name_ok(name, loose_names):
        rule = (
            f"1 to {MAX_LOOSE_NAME} characters, none a control character or a lone surrogate"
            if loose_names
            else "1 to 64 characters from A-Z, a-z, 0-9, _ and -"
        )
        raise InvalidRequest(f"{where}.function.name must be {rule}", param=f"{where}.function.name")
    description = fn.get("description")
    if description is None:
        description = ""
    if not isinstance(description, str):
        raise InvalidRequest(
            f"{where}.function.description must be a string", param=f"{where}.function.description"
        )
    strict = fn.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise InvalidRequest(f"{where}.function.strict must be a boolean", param=f"{where}.function.strict")
    # Always enforced in full: a keyword that cannot be enforced is refused, never dropped,
    # so a call either fits its tool's signature or is not produced.
    strict = True
    parameters = fn.get("parameters")
    if parameters is None:
        parameters = _empty_object()
    if not isinstance(parameters, Mapping):
        raise InvalidRequest(
            f"{where}.function.parameters must be a JSON schema object", param=f"{where}.function.parameters"
        )
    spec = ToolSpec(name, description, dict(parameters), strict)
    args_rule(spec, param=f"{where}.function.parameters")  # compile now: errors belong to the request
    return spec


def parse_tool_choice(value: Any, tools: list[ToolSpec]) -> ToolChoice:
    """Validate OpenAI `tool_choice`: "auto" | "none" | "required" |
    {"type": "function", "function": {"name": ...}}. None (absent) means "auto" when
    there are tools and "none" otherwise. "required" or a named function without tools,
    or naming an unknown tool, raises InvalidRequest(param="tool_choice")."""
    if value is None:
        return ToolChoice("auto" if tools else "none")
    if value in ("auto", "none", "required"):
        choice = ToolChoice(value)
    elif isinstance(value, Mapping):
        fn = value.get("function")
        name = fn.get("name") if isinstance(fn, Mapping) else None
        if value.get("type") != "function" or not isinstance(name, str):
            raise InvalidRequest(
                'tool_choice object must be {"type": "function", "function": {"name": ...}}',
                param="tool_choice",
            )
        if name not in {t.name for t in tools}:
            raise InvalidRequest(
                f"tool_choice names {name!r}, which is not one of the tools", param="tool_choice"
            )
        choice = ToolChoice("function", name)
    else:
        raise InvalidRequest(
            'tool_choice must be "auto", "none", "required" or a function object', param="tool_choice"
        )
    if choice.forced and not tools:
        raise InvalidRequest(f"tool_choice {choice.mode!r} needs at least one tool", param="tool_choice")
    return choice


def openai_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """The OpenAI-shaped `tools` list templates expect (as the client sent it, minus
    `strict`, which no template reads)."""
    out = []
    for t in tools:
        fn: dict[str, Any] = {"name": t.name}
        if t.description:
            fn["description"] = t.description
        fn["parameters"] = t.parameters
        out.append({"type": "function", "function": fn})
    return out


def args_rule(spec: ToolSpec, *, param: str = "tools", layout: Layout = "spaced") -> str:
    """The llguidance Lark expression (`%json {...}`) generating the arguments of `spec`:
    a JSON object valid under its schema. Cached per schema. Raises GrammarError (param
    set to `param`) when the schema cannot be enforced or does not describe an object."""
    kind = spec.parameters.get("type", "object")
    if kind != "object":
        raise InvalidRequest(f"{param} must describe an object (got type {json.dumps(kind)})", param=param)
    try:
        return json_rule(json.dumps(spec.parameters), strict=spec.strict, object_=True, layout=layout)
    except GrammarError as e:
        e.param = param
        raise


@functools.lru_cache(maxsize=256)
def json_rule(schema_json: str, *, strict: bool, object_: bool = False, layout: Layout = "spaced") -> str:
    """The Lark expression (`%json {...}`) for the JSON schema text `schema_json`
    (cached per text); `object_` adds `"type": "object"` when the schema leaves `type`
    out. Raises GrammarError for a schema that cannot be enforced."""
    # The text keeps the client's key order: llguidance generates properties in schema
    # order. Arguments must be an object even when the schema leaves `type` out (OpenAI
    # clients json-decode them into a dict). Each tool keeps its own `%json` root so
    # `$ref` pointers like "#/$defs/x" resolve against the schema they were written in.
    schema = json.loads(schema_json)
    if object_:
        schema.setdefault("type", "object")
    # No invented argument names: a key the schema does not name is never generated unless
    # the schema asks for others (additionalProperties / patternProperties).
    # Arguments are laid out as the template writes past calls (json.dumps' separators,
    # unless indented): a free layout would let a model spend its budget on whitespace.
    lark = Grammar.from_json_schema(schema, strict=strict, layout=layout, shape="tight").lark
    if not lark.startswith("start: %json "):  # llamay.grammar.schema.schema_lark's shape
        raise AssertionError("unexpected JSON schema grammar shape")
    return lark[len("start: ") :].strip()

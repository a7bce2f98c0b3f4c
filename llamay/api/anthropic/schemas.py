"""Anthropic Messages request bodies parsed into typed records. Every bad field is an
InvalidRequest (400) naming it; nothing later re-checks what the client sent.

Defaults where Anthropic's and a local model's differ:
- `thinking` absent means off (as with Claude); a model that cannot stop thinking still
  returns what it thought, as thinking blocks. `budget_tokens` may be any size >= 1.
- `tool_choice` "any" / "tool" force calls of the given tools only (no extra tool).
- `temperature` may go up to 2 (Anthropic: 1).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ...chat.flow import ChatOptions
from ...chat.prepare import Knobs
from ...chat.tools import ToolChoice, ToolSpec, parse_tools
from ...errors import InvalidRequest
from ...grammar import Grammar
from ...types import SamplingParams
from ..fields import Fields
from ..jsonformat import json_style, schema_grammar
from .cache import last_breakpoint
from .content import MARK, Converted, chat_messages

__all__ = [
    "MessagesRequest",
    "Thinking",
    "parse_messages_request",
    "parse_tools_field",
    "parse_tool_choice_field",
]

MAX_STOP = 32


@dataclass(frozen=True)
class Thinking:
    on: bool = False
    budget: int | None = None
    shown: bool = True  # display "omitted": blocks keep their signature, not their text


@dataclass(frozen=True)
class MessagesRequest:
    """One /v1/messages (or count_tokens) body. `options.messages` is the conversation
    without a final assistant prefill, which is `prefill`. `marked` is the same request
    with MARK at the last cache breakpoint (None without breakpoints)."""

    model: str
    stream: bool
    max_tokens: int | None
    stop: tuple[str, ...]
    sampling: SamplingParams
    options: ChatOptions
    prefill: str | None
    thinking: Thinking
    marked: tuple[ChatOptions, str | None] | None = None
    sampling_given: frozenset[str] = frozenset()  # sampling fields the body set

    @property
    def knobs(self) -> Knobs:
        """The pipeline's knobs: the model's and the server's sampling defaults go under the
        fields the body set (`Knobs.under`)."""
        return Knobs(
            sampling=self.sampling, given=self.sampling_given, max_tokens=self.max_tokens, stop=self.stop
        )


def _tool(raw: Any, where: str, marked: bool) -> dict[str, Any]:
    f = Fields(raw, where)
    kind = f.text("type", "custom")
    if kind != "custom":
        raise InvalidRequest(
            f"'{where}.type' {kind!r}: server tools are not available here; define a custom tool "
            "with name, description and input_schema",
            param=f"{where}.type",
        )
    schema = f.obj("input_schema")
    if schema is None:
        raise InvalidRequest(f"'{where}.input_schema' is required", param=f"{where}.input_schema")
    description = (f.text("description", "") or "") + (MARK if marked else "")
    return {
        "type": "function",
        "function": {"name": f.raw("name"), "description": description, "parameters": dict(schema)},
    }


def parse_tools_field(raw: Any, mark_tool: int | None = None) -> list[ToolSpec]:
    """Anthropic `tools` ([{name, description?, input_schema, cache_control?}]) as ToolSpecs;
    errors name Anthropic's fields (tools[i].name, tools[i].input_schema)."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InvalidRequest("'tools' must be an array of tool objects", param="tools")
    shaped = [_tool(t, f"tools[{i}]", i == mark_tool) for i, t in enumerate(raw)]
    try:
        return parse_tools(shaped)
    except InvalidRequest as exc:
        for theirs, ours in ((".function.parameters", ".input_schema"), (".function.", ".")):
            exc.message = exc.message.replace(theirs, ours)
            exc.param = exc.param.replace(theirs, ours) if exc.param else exc.param
        exc.args = (exc.message,)
        raise


def parse_tool_choice_field(raw: Any, tools: list[ToolSpec]) -> tuple[ToolChoice, bool | None]:
    """`tool_choice` -> (choice, parallel calls allowed: None when unsaid, which leaves it
    to the model's template). auto | any (-> required) | tool (-> that function) | none;
    absent means auto (none without tools)."""
    if raw is None:
        return ToolChoice("auto" if tools else "none"), None
    f = Fields(raw, "tool_choice")
    kind = f.text("type", required=True)
    disable = f.flag("disable_parallel_tool_use", None)
    parallel = None if disable is None else not disable
    if kind in ("auto", "none"):
        return ToolChoice("auto" if tools and kind == "auto" else "none"), parallel
    if not tools:
        raise InvalidRequest(f"tool_choice {kind!r} needs at least one tool in 'tools'", param="tool_choice")
    if kind == "any":
        return ToolChoice("required"), parallel
    if kind == "tool":
        name = f.text("name", required=True)
        if name not in {t.name for t in tools}:
            raise InvalidRequest(
                f"tool_choice names {name!r}, which is not one of the tools", param="tool_choice.name"
            )
        return ToolChoice("function", name), parallel
    raise InvalidRequest("'tool_choice.type' must be one of auto, any, tool, none", param="tool_choice.type")


def _thinking(f: Fields) -> Thinking:
    raw = f.obj("thinking")
    if raw is None:
        return Thinking()
    t = Fields(raw, "thinking")
    kind = t.text("type", required=True)
    shown = t.text("display") != "omitted"
    if kind == "disabled":
        return Thinking()
    if kind == "adaptive":
        return Thinking(True, None, shown)
    if kind == "enabled":
        budget = t.integer("budget_tokens", None, lo=1)
        if budget is None:
            raise InvalidRequest("'thinking.budget_tokens' is required", param="thinking.budget_tokens")
        return Thinking(True, budget, shown)
    raise InvalidRequest("'thinking.type' must be one of enabled, adaptive, disabled", param="thinking.type")


def _grammar(f: Fields) -> Grammar | None:
    """Structured output: `output_config.format` (or the older `output_format`)."""
    config = f.obj("output_config")
    fmt, where = (config.get("format"), "output_config.format") if config else (None, "")
    if fmt is None and f.raw("output_format") is not None:
        fmt, where = f.obj("output_format"), "output_format"
    if fmt is None:
        return None
    ff = Fields(fmt, where)
    if ff.text("type", required=True) != "json_schema":
        raise InvalidRequest(f"'{where}.type' must be \"json_schema\"", param=f"{where}.type")
    schema = ff.obj("schema")
    if schema is None:
        raise InvalidRequest(f"'{where}.schema' is required", param=f"{where}.schema")
    # `strict` (a llamay extension here): refuse what cannot be enforced, instead of
    # validating it afterwards and reporting it in `schema_check`.
    strict = bool(ff.flag("strict", False))
    return schema_grammar(dict(schema), json_style(f), strict=strict, param=f"{where}.schema")


def parse_messages_request(body: Any, *, counting: bool = False) -> MessagesRequest:
    """Parse a Messages body; `counting` (count_tokens) needs no `max_tokens`."""
    f = Fields(body)
    model = f.text("model", "") or ""
    messages = f.array("messages", required=True)
    max_tokens = f.integer("max_tokens", None, lo=1)
    if max_tokens is None and not counting:
        raise InvalidRequest("'max_tokens' is required", param="max_tokens")
    if f.raw("metadata") is not None:
        Fields(f.obj("metadata"), "metadata").text("user_id")  # accepted, type-checked only
    thinking = _thinking(f)
    sampling = SamplingParams(
        temperature=f.number("temperature", 1.0, lo=0.0, hi=2.0),
        top_p=f.number("top_p", 1.0, lo=0.0, hi=1.0),
        top_k=f.integer("top_k", 0, lo=0),
        seed=f.integer("seed", None),  # llamay's: a seeded request repeats its sample exactly
    ).validate()
    spot = last_breakpoint(f.raw("tools"), f.raw("system"), messages, f.raw("cache_control"))
    tools = parse_tools_field(f.raw("tools"))
    choice, parallel = parse_tool_choice_field(f.raw("tool_choice"), tools)
    converted = chat_messages(f.raw("system"), messages)
    if converted.prefill is not None and thinking.on:
        raise InvalidRequest(
            "a final assistant message (prefill) cannot be continued with thinking enabled", param="messages"
        )
    options = ChatOptions(
        messages=converted.messages,
        tools=tools,
        tool_choice=choice,
        parallel_tool_calls=parallel,
        grammar=_grammar(f),
        thinking=thinking.on,
        thinking_budget=thinking.budget,
        finish_tool=False,
        effort="on" if thinking.on else None,
    )
    marked = None
    if spot is not None:
        mark_tools = parse_tools_field(f.raw("tools"), spot[1]) if spot[0] == "tools" else tools
        again: Converted = chat_messages(f.raw("system"), messages, spot)
        marked = (replace(options, messages=again.messages, tools=mark_tools), again.prefill)
    stream = False if counting else f.flag("stream", False)
    given = frozenset(k for k in ("temperature", "top_p", "top_k") if f.raw(k) is not None)
    return MessagesRequest(
        model,
        stream,
        max_tokens,
        f.strings("stop_sequences", MAX_STOP, single=False),
        sampling,
        options,
        converted.prefill,
        thinking,
        marked,
        given,
    )

"""Hermes / Qwen tool calls: `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`.

Used by Hermes 2 Pro, Qwen 2.5, Qwen 3 and their fine-tunes. Templates read the
OpenAI-shaped `tools` list and render history themselves (assistant `tool_calls`, `tool`
results as <tool_response>), so prepare only passes the tools. In Qwen vocabularies
<tool_call> and </tool_call> are single tokens: the trigger and the grammar use them.
"""

from __future__ import annotations

from typing import Any

from ..template import normalize_messages
from .base import LarkRules, Special, ToolPlan, chosen_tools, marked_plan, marker
from .block import CallSyntax
from .spec import ToolChoice, ToolSpec, openai_tools
from .stream import ToolStreamParser

__all__ = ["HermesFormat", "OPEN", "CLOSE"]

OPEN = "<tool_call>"
CLOSE = "</tool_call>"
SYNTAX = CallSyntax(openers=((OPEN, ""),), close=CLOSE)


class HermesFormat:
    """Calls in <tool_call> tags, one JSON object each; parallel calls are
    consecutive blocks."""

    name = "hermes"

    def prepare(
        self, messages: list[dict[str, Any]], tools: list[ToolSpec]
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        return normalize_messages(messages), ({"tools": openai_tools(tools)} if tools else {})

    def plan(self, tools: list[ToolSpec], choice: ToolChoice, parallel: bool, special: Special) -> ToolPlan:
        rules = LarkRules()
        call = rules.call_object(chosen_tools(tools, choice), "arguments")
        close = marker(CLOSE, special)
        body = f"ws? {call} ws? {close}"
        if parallel:
            body += f" (ws? {marker(OPEN, special)} ws? {call} ws? {close})*"
        return marked_plan(rules, body, OPEN, special, choice.forced)

    def parser(self, tools: list[ToolSpec], finish_tool: str | None = None) -> ToolStreamParser:
        return ToolStreamParser(SYNTAX, tools, finish_tool)

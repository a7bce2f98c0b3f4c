"""Mistral tool calls: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`.

Mistral 7B v0.3, Nemo and Small use one JSON array after the [TOOL_CALLS] control token.
Their templates insist that call ids be exactly 9 alphanumeric characters (Nemo-era
models also write such an `"id"` themselves), so prepare maps OpenAI ids to stable
9-character ids in both the assistant calls and the tool results.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from ..template import normalize_messages
from .base import LarkRules, Special, ToolPlan, chosen_tools, marked_plan
from .block import CallSyntax
from .spec import ToolChoice, ToolSpec, openai_tools
from .stream import ToolStreamParser

__all__ = ["MistralFormat", "OPEN", "mistral_id"]

OPEN = "[TOOL_CALLS]"
SYNTAX = CallSyntax(openers=((OPEN, ""),), call_path=("*",))
_ID = re.compile(r"[A-Za-z0-9]{9}")


def mistral_id(call_id: Any) -> str:
    """A 9-character alphanumeric id for `call_id`: itself when it already is one,
    else a hash (the same for the call and its result)."""
    text = str(call_id)
    return text if _ID.fullmatch(text) else hashlib.sha256(text.encode()).hexdigest()[:9]


class MistralFormat:
    """One [TOOL_CALLS] array; parallel calls are its elements."""

    name = "mistral"

    def prepare(
        self, messages: list[dict[str, Any]], tools: list[ToolSpec]
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        out = []
        for i, m in enumerate(normalize_messages(messages)):
            if m.get("tool_calls"):
                m["tool_calls"] = [
                    {**c, "id": mistral_id(c.get("id", f"{i}.{j}"))} if isinstance(c, dict) else c
                    for j, c in enumerate(m["tool_calls"])
                ]
            if m["role"] == "tool" and "tool_call_id" in m:
                m["tool_call_id"] = mistral_id(m["tool_call_id"])
            out.append(m)
        return out, ({"tools": openai_tools(tools)} if tools else {})

    def plan(self, tools: list[ToolSpec], choice: ToolChoice, parallel: bool, special: Special) -> ToolPlan:
        rules = LarkRules()
        call = rules.call_object(chosen_tools(tools, choice), "arguments", optional_id=True)
        more = f' (ws? "," ws? {call})*' if parallel else ""
        body = f'ws? "[" ws? {call}{more} ws? "]"'
        return marked_plan(rules, body, OPEN, special, choice.forced)

    def parser(self, tools: list[ToolSpec], finish_tool: str | None = None) -> ToolStreamParser:
        return ToolStreamParser(SYNTAX, tools, finish_tool)

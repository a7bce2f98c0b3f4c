"""Llama 3.1 / 3.2 / 3.3 JSON tool calls: `{"name": "f", "parameters": {...}}`.

The model answers a call with the bare JSON object (sometimes after <|python_tag|>);
there is no dedicated marker token, so the trigger is the text `{"name": "` that every
call starts with in the templates. Meta's templates render one call per assistant
message (they raise otherwise), so prepare splits parallel calls from history into one
assistant message each, followed by its result. Parallel calls are generated as
consecutive objects, optionally separated by ";".
"""

from __future__ import annotations

from typing import Any

from ..template import normalize_messages
from .base import LarkRules, Special, ToolPlan, chosen_tools, lit, marked_plan
from .block import CallSyntax
from .spec import ToolChoice, ToolSpec, openai_tools
from .stream import ToolStreamParser

__all__ = ["Llama3Format", "OPEN"]

OPEN = '{"name": "'
PYTHON_TAG = "<|python_tag|>"
SYNTAX = CallSyntax(
    openers=((PYTHON_TAG + OPEN, OPEN), (OPEN, OPEN)),
    args_keys=("parameters", "arguments"),
    separators=" \t\r\n;",
)


class Llama3Format:
    """Bare JSON calls with a `parameters` object."""

    name = "llama3"

    def prepare(
        self, messages: list[dict[str, Any]], tools: list[ToolSpec]
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        return _one_call_per_message(normalize_messages(messages)), (
            {"tools": openai_tools(tools)} if tools else {}
        )

    def plan(self, tools: list[ToolSpec], choice: ToolChoice, parallel: bool, special: Special) -> ToolPlan:
        rules = LarkRules()
        # The trigger already produced `{"name": "`: the grammar goes on from the name.
        rest = rules.add(
            "rest", rules.named(chosen_tools(tools, choice), "parameters", open_quote=False) + ' ws? "}"'
        )
        body = rest + (f' (ws? ";"? ws? {lit(OPEN)} {rest})*' if parallel else "")
        return marked_plan(rules, body, OPEN, special, choice.forced)

    def parser(self, tools: list[ToolSpec], finish_tool: str | None = None) -> ToolStreamParser:
        return ToolStreamParser(SYNTAX, tools, finish_tool)


def _one_call_per_message(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Split an assistant message with several calls into (call, its result) pairs, the
    results taken from the tool messages that follow it (by tool_call_id, else in order)."""
    out: list[dict[str, Any]] = []
    i = 0
    while i < len(messages):
        m = messages[i]
        calls = m.get("tool_calls") or []
        if m["role"] != "assistant" or len(calls) < 2:
            out.append(m)
            i += 1
            continue
        j = i + 1
        while j < len(messages) and messages[j]["role"] in ("tool", "ipython"):
            j += 1
        results = messages[i + 1 : j]
        for k, call in enumerate(calls):
            out.append({**m, "content": m["content"] if k == 0 else None, "tool_calls": [call]})
            call_id = call.get("id") if isinstance(call, dict) else None
            pick = next(
                (n for n, r in enumerate(results) if call_id and r.get("tool_call_id") == call_id), None
            )
            if pick is None:  # results without ids pair up with calls in order
                pick = next((n for n, r in enumerate(results) if not r.get("tool_call_id")), None)
            if pick is not None:
                out.append(results.pop(pick))
        out.extend(results)  # results matching no call stay, after the calls
        i = j
    return out

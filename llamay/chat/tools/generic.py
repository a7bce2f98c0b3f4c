"""The generic format, for templates with no tool support.

The tools and the answer format are described in a system message; the model answers
with one JSON object, either `{"tool_calls": [{"name": ..., "arguments": {...}}]}` or
`{"response": "..."}`. Since every answer is JSON, the plan is always immediate (the
grammar covers the whole output); a `response` string streams out as content.
History is rewritten into plain turns any template renders: assistant calls become that
same JSON as assistant text, and tool results become one user message per run of results.
"""

from __future__ import annotations

import json
from typing import Any

from ..template import normalize_messages
from .base import LarkRules, Special, ToolPlan, chosen_tools, lit
from .block import CallSyntax
from .spec import ToolChoice, ToolSpec, json_rule, openai_tools
from .stream import ToolStreamParser

__all__ = ["GenericFormat", "system_prompt"]

SYNTAX = CallSyntax(call_path=("tool_calls", "*"), response_path=("response",), whole_output=True)


def system_prompt(tools: list[ToolSpec]) -> str:
    """The instructions that describe `tools` and the JSON answer format."""
    listing = "\n".join(json.dumps(t["function"], ensure_ascii=False) for t in openai_tools(tools))
    return (
        "You can call the following tools (JSON schema of each tool's arguments given):\n"
        f"{listing}\n\n"
        "Answer with a single JSON object and nothing else. To call tools:\n"
        '{"tool_calls": [{"name": "<tool name>", "arguments": {<arguments>}}]}\n'
        "To answer the user directly:\n"
        '{"response": "<your answer>"}\n'
        "Tool results come back to you as a tool_results message."
    )


class GenericFormat:
    """JSON-object answers. `system_role`: the template renders system messages; if not,
    a leading system message and the instructions open the first user message."""

    name = "generic"

    def __init__(self, *, system_role: bool = True) -> None:
        self.system_role = system_role

    def prepare(
        self, messages: list[dict[str, Any]], tools: list[ToolSpec]
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        out = _plain_history(normalize_messages(messages))
        text = system_prompt(tools) if tools else ""
        first = out[0] if out else None
        system = first if first is not None and first["role"] == "system" else None
        if self.system_role:
            if system is not None and text:
                out[0] = {**system, "content": f"{system['content'] or ''}\n\n{text}"}
            elif text:
                out.insert(0, {"role": "system", "content": text})
            return out, {}
        # No system role: the system text and the instructions open the first user turn.
        if system is not None:
            out.pop(0)
        prefix = "\n\n".join(p for p in (system["content"] if system else "", text) if p)
        k = next((n for n, m in enumerate(out) if m["role"] == "user"), None)
        if prefix and k is None:
            out.insert(0, {"role": "user", "content": prefix})
        elif prefix and k is not None:
            out[k] = {**out[k], "content": f"{prefix}\n\n{out[k]['content'] or ''}"}
        return out, {}

    def plan(self, tools: list[ToolSpec], choice: ToolChoice, parallel: bool, special: Special) -> ToolPlan:
        rules = LarkRules()
        call = rules.call_object(chosen_tools(tools, choice), "arguments")
        more = f' (ws? "," ws? {call})*' if parallel else ""
        calls = f'{lit(json.dumps("tool_calls"))} ws? ":" ws? "[" ws? {call}{more} ws? "]"'
        branch = calls
        if not choice.forced:
            text = rules.add("text", json_rule('{"type": "string"}', strict=True))
            branch = f'({calls} | {lit(json.dumps("response"))} ws? ":" ws? {text})'
        return ToolPlan(rules.grammar(f'"{{" ws? {branch} ws? "}}"'), immediate=True)

    def parser(self, tools: list[ToolSpec], finish_tool: str | None = None) -> ToolStreamParser:
        return ToolStreamParser(SYNTAX, tools, finish_tool)


def _plain_history(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    names: dict[str, Any] = {}  # call id -> tool name, to label results
    results: list[dict[str, Any]] = []
    for m in [*messages, None]:
        if m is not None and m["role"] == "tool":
            name = names.get(str(m.get("tool_call_id"))) or m.get("name")
            results.append({"name": name, "content": m["content"]})
            continue
        if results:
            text = json.dumps({"tool_results": results}, ensure_ascii=False)
            results = []
            # Templates without tool support often insist on alternating roles: a user
            # message right after the results joins them in one turn.
            if m is not None and m["role"] == "user" and isinstance(m["content"], str):
                m = {**m, "content": text + "\n\n" + m["content"]}
            else:
                out.append({"role": "user", "content": text})
        if m is None:
            break
        calls = m.get("tool_calls")
        if m["role"] == "assistant" and calls:
            listed = []
            for c in calls:
                call: dict[str, Any] = c if isinstance(c, dict) else {}
                fn: dict[str, Any] = call["function"] if isinstance(call.get("function"), dict) else {}
                names[str(call.get("id"))] = fn.get("name")
                listed.append({"name": fn.get("name"), "arguments": fn.get("arguments", {})})
            m = {"role": "assistant", "content": json.dumps({"tool_calls": listed}, ensure_ascii=False)}
        out.append(m)
    return out

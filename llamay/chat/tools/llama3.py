"""Llama 3.1 / 3.2 / 3.3 JSON tool calls: `{"name": "f", "parameters": {...}}`.

The model answers a call with the bare JSON object (sometimes after <|python_tag|>);
there is no dedicated marker token, so the trigger is the text `{"name": "` that every
call starts with in the templates. After <|python_tag|> Llama 3.1 may also call a
built-in tool the Python way (`brave_search.call(query="...")`) or write bare code for
its code interpreter (a call of the offered `python`/`ipython`/`code_interpreter` tool
with `{"code": ...}`). Meta's templates render one call per assistant message (they
raise otherwise), so prepare splits parallel calls from history into one assistant
message each, followed by its result. Parallel calls are generated as consecutive
objects, optionally separated by ";".
"""

from __future__ import annotations

import functools
from typing import Any

from ..template import normalize_messages
from .base import LarkRules, Special, ToolPlan, chosen_tools, lit, marked_plan
from .block import CallSyntax
from .named import code_args, code_tool
from .program import BlockIO, JsonCalls, Mismatch, Opt, Program
from .pythonic import PyArgs, kwargs_json
from .spec import ToolChoice, ToolSpec, openai_tools
from .stream import ToolStreamParser

__all__ = ["Llama3Format", "OPEN", "one_call_per_message"]

OPEN = '{"name": "'
PYTHON_TAG = "<|python_tag|>"
SYNTAX = CallSyntax(openers=((OPEN, OPEN),), args_keys=("parameters", "arguments"))


def _program(io: BlockIO, opener: str, *, names: set[str]) -> Program:
    if opener == OPEN:
        yield JsonCalls(SYNTAX, OPEN, io)
        return
    # After <|python_tag|>: a JSON call, a built-in tool's Python call, or code.
    if (yield Opt(["{"])) is not None:
        yield JsonCalls(SYNTAX, "{", io)
        return
    builtins = [f"{n}.call(" for n in sorted(names)]
    head = (yield Opt(builtins)) if builtins else None
    if head is not None:
        args = kwargs_json((yield PyArgs()))
        if args is None:
            raise Mismatch()
        io.call(head[: -len(".call(")]).args(args)
        return
    tool = code_tool(names)
    if tool is None:
        raise Mismatch()
    yield from code_args(io.call(tool), [])


class Llama3Format:
    """Bare JSON calls with a `parameters` object."""

    name = "llama3"

    def prepare(
        self, messages: list[dict[str, Any]], tools: list[ToolSpec]
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        return one_call_per_message(normalize_messages(messages)), (
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
        program = functools.partial(_program, names={t.name for t in tools})
        syntax = CallSyntax(openers=((PYTHON_TAG, ""), (OPEN, OPEN)), program=program, separators=" \t\r\n;")
        return ToolStreamParser(syntax, tools, finish_tool)


def one_call_per_message(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
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

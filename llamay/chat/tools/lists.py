"""Tool calls as one JSON array of call objects after a marker.

- Granite 3.x: `<|tool_call|>[{"name": ..., "arguments": {...}}, ...]`.
- Firefunction v2: ` functools[{"name": ..., "arguments": {...}}, ...]`.
- Command R+ (tool use): `Action:\\n```json\\n[{"tool_name": ..., "parameters": {...}}]\\n```` .
- Command R7B: `<|START_ACTION|>[{"tool_call_id": "0", "tool_name": ..., "parameters":
  {...}}]<|END_ACTION|>` (after its `<|START_THINKING|>` plan).

(Mistral's `[TOOL_CALLS][...]` is the same shape, with its own history rules: mistral.py.)
Parallel calls are the array's elements.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...grammar.shape import Layout
from ..template import normalize_messages
from .base import LarkRules, Special, TemplateFormat, ToolPlan, chosen_tools, lit, marked_plan, marker
from .block import CallSyntax
from .program import BlockIO, JsonCalls, Lit, Opt, Program
from .spec import ToolChoice, ToolSpec, openai_tools
from .stream import ToolStreamParser

__all__ = ["COMMAND_R7B", "COMMAND_R_PLUS", "FIREFUNCTION", "GRANITE", "JsonListFormat", "call_object"]


def call_object(rules: LarkRules, tools: Sequence[ToolSpec], keys: Sequence[str], name_key: str, args_key: str,
                id_rule: str | None = None) -> str:  # fmt: skip
    """`{"k": v, ...}` with `keys` in order: the tool's name under `name_key`, its
    arguments under `args_key`, `id_rule` under any other key; one alternative per tool
    (so the arguments' schema is the named tool's)."""
    alts = []
    for i, tool in enumerate(tools):
        fields = []
        for key in keys:
            if key == name_key:
                value = lit(json.dumps(tool.name))
            elif key == args_key:
                value = rules.args(i, tool)
            else:
                assert id_rule is not None
                value = id_rule
            fields.append(f'{lit(json.dumps(key))} ws? ":" ws? {value}')
        alts.append(rules.add(f"obj_{i}", '"{" ws? ' + ' ws? "," ws? '.join(fields) + ' ws? "}"'))
    return rules.add("call", "(" + " | ".join(alts) + ")")


def _list_program(
    io: BlockIO, opener: str, *, syntax: CallSyntax, fence: tuple[str, str], close: str
) -> Program:
    if fence[0]:
        yield Lit(fence[0])
    replay = dict(syntax.openers).get(opener, "")
    yield JsonCalls(syntax, replay, io)
    if fence[1]:
        yield Opt([fence[1]])
    if close:
        yield Opt([close])


@dataclass
class JsonListFormat(TemplateFormat):
    """One JSON array of calls after `opener` (of which `replay` already belongs to the
    JSON), inside an optional code `fence` (opening, closing), then `close`. Call objects
    have `keys` in that order; an `id_key` holds the index as a string. `render_calls`:
    the template does not show the history's calls (Granite 3.3's), so prepare writes
    them into the assistant text the way the model writes them."""

    name: str = ""
    opener: str = ""
    replay: str = ""
    keys: tuple[str, ...] = ("name", "arguments")
    name_key: str = "name"
    args_key: str = "arguments"
    id_key: str | None = None
    fence: tuple[str, str] = ("", "")
    close: str = ""
    # Text the model writes before the marker in a forced call (Firefunction's space).
    lead: str = ""
    render_calls: bool = False
    # A tool the template offers the model for answering without a call (Command R+'s
    # "directly-answer"): allowed when the choice is "auto", never reported.
    answer_tool: str | None = None
    # How the template lays out its calls' JSON (Command R's are indented by four).
    layout: Layout = "spaced"

    def prepare(
        self, messages: list[dict[str, Any]], tools: list[ToolSpec]
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        out = normalize_messages(messages)
        if self.render_calls:
            out = [self._calls_as_text(m) for m in out]
        return out, ({"tools": openai_tools(tools)} if tools else {})

    def _calls_as_text(self, m: dict[str, Any]) -> dict[str, Any]:
        calls = m.get("tool_calls") if m["role"] == "assistant" else None
        if not calls:
            return m
        objs = []
        for i, c in enumerate(calls):
            fn = c.get("function") if isinstance(c, dict) else None
            if not isinstance(fn, dict):
                continue
            values = {self.name_key: fn.get("name"), self.args_key: fn.get("arguments", {})}
            if self.id_key:
                values[self.id_key] = str(i)
            objs.append({k: values[k] for k in self.keys})
        text = self.opener + json.dumps(objs, ensure_ascii=False)[len(self.replay) :]
        rest = {k: v for k, v in m.items() if k != "tool_calls"}
        return {**rest, "content": (m.get("content") or "") + text}

    def plan(self, tools: list[ToolSpec], choice: ToolChoice, parallel: bool, special: Special) -> ToolPlan:
        rules = LarkRules(self.layout)
        id_rule = rules.add("ID", '/"[0-9]{1,3}"/') if self.id_key else None
        chosen = chosen_tools(tools, choice)
        if self.answer_tool and not choice.forced and self.answer_tool not in {t.name for t in tools}:
            chosen.append(ToolSpec(self.answer_tool, parameters={"type": "object", "properties": {}}))
        call = call_object(rules, chosen, self.keys, self.name_key, self.args_key, id_rule)
        more = f' (ws? "," ws? {call})*' if parallel else ""
        # The opener may end with the array's "[" (Firefunction's "functools[").
        body = f'ws? {call}{more} ws? "]"'
        if not self.replay:
            body = f'ws? "[" {body}'
        if self.fence[0]:  # the template writes "```json\n[...]```\n"
            body = f"ws? {lit(self.fence[0])} {body} ws? {lit(self.fence[1])} ws?"
        if self.close:
            body += f" {marker(self.close, special)}"
        plan = marked_plan(rules, body, self.opener, special, choice.forced)
        if choice.forced and self.lead:
            lark = plan.grammar.lark.replace("start: ", f"start: {lit(self.lead)} ", 1)
            plan = ToolPlan(type(plan.grammar).from_lark(lark, param="tools"), immediate=True)
        return plan

    def parser(self, tools: list[ToolSpec], finish_tool: str | None = None) -> ToolStreamParser:
        syntax = CallSyntax(
            openers=((self.opener, self.replay),),
            call_path=("*",),
            name_keys=(self.name_key,),
            args_keys=(self.args_key,),
            silent_names=tuple(n for n in (self.answer_tool,) if n and n not in {t.name for t in tools}),
        )
        program = functools.partial(_list_program, syntax=syntax, fence=self.fence, close=self.close)
        return ToolStreamParser(CallSyntax(openers=syntax.openers, program=program), tools, finish_tool)


@dataclass
class FirefunctionFormat(JsonListFormat):
    """Firefunction's template reads the tools as `functions` (their JSON) and the date as
    `datetime`, not `tools`; both must be set, tools or not."""

    def prepare(
        self, messages: list[dict[str, Any]], tools: list[ToolSpec]
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        out, extra = super().prepare(messages, tools)
        functions = json.dumps(openai_tools(tools), indent=2, ensure_ascii=False) if tools else ""
        return out, {**extra, "functions": functions, "datetime": time.strftime("%b %d %Y")}


GRANITE = JsonListFormat("granite", "<|tool_call|>")
FIREFUNCTION = FirefunctionFormat("firefunction", "functools[", replay="[", lead=" ")
COMMAND_R_PLUS = JsonListFormat(
    "command_r_plus",
    "Action:",
    keys=("tool_name", "parameters"),
    name_key="tool_name",
    args_key="parameters",
    fence=("```json", "```"),
    answer_tool="directly-answer",
    layout="indented",
)
COMMAND_R7B = JsonListFormat(
    "command_r7b",
    "<|START_ACTION|>",
    keys=("tool_call_id", "tool_name", "parameters"),
    name_key="tool_name",
    args_key="parameters",
    id_key="tool_call_id",
    close="<|END_ACTION|>",
    layout="indented",
)

"""gpt-oss tool calls in harmony: a message to the recipient `functions.NAME` on the
commentary channel, its arguments JSON: `<|channel|>commentary to=functions.NAME
<|constrain|>json<|message|>{...}<|call|>` (the recipient may also stand in the role
header: `<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>`).

The channel splitter (reasoning.HarmonyParser) runs first: it hands every message to a
function on as the template writes a call, which is what this format's parser reads.
A generation ends at `<|call|>`, so there is one call per turn (no parallel calls), and
the template renders one per assistant message: prepare splits the history's.
"""

from __future__ import annotations

from typing import Any

from ..reasoning import HARMONY_CALL, HARMONY_CALL_END
from ..template import normalize_messages
from .base import LarkRules, Special, TemplateFormat, ToolPlan, chosen_tools, lit, marked_plan, marker
from .block import CallSyntax
from .llama3 import one_call_per_message
from .named import named_alternatives
from .params import NAME_LIMIT
from .program import Args, BlockIO, Lit, Opt, Program, Until
from .spec import ToolChoice, ToolSpec, openai_tools
from .stream import ToolStreamParser

__all__ = ["HarmonyFormat", "TRIGGER"]

CHANNEL, MESSAGE, CONSTRAIN = "<|channel|>", "<|message|>", "<|constrain|>"
TRIGGER = "to=functions."


def _program(io: BlockIO, opener: str) -> Program:
    name, _ = yield Until([CHANNEL], NAME_LIMIT)
    yield Lit("commentary json" + MESSAGE)
    call = io.call(name)
    yield Args(call)
    yield Opt([HARMONY_CALL_END])
    if not call.known:
        io.content(opener + io.raw)


class HarmonyFormat(TemplateFormat):
    """Harmony's function calls (gpt-oss)."""

    name = "harmony"

    def prepare(
        self, messages: list[dict[str, Any]], tools: list[ToolSpec]
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        # The template reads an assistant message's reasoning from `thinking`; clients
        # send it back as `reasoning_content`.
        out = []
        for m in one_call_per_message(normalize_messages(messages)):
            if (
                m["role"] == "assistant"
                and "thinking" not in m
                and isinstance(m.get("reasoning_content"), str)
            ):
                m = {**m, "thinking": m["reasoning_content"]}
            out.append(m)
        return out, ({"tools": openai_tools(tools)} if tools else {})

    def plan(self, tools: list[ToolSpec], choice: ToolChoice, parallel: bool, special: Special) -> ToolPlan:
        rules = LarkRules()
        channel, message, constrain = (
            marker(CHANNEL, special),
            marker(MESSAGE, special),
            marker(CONSTRAIN, special),
        )
        if choice.forced:
            # The model's own layout: `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>`.
            call = named_alternatives(
                rules,
                chosen_tools(tools, choice),
                lambda t, a: f'{lit(t.name)} " " {constrain} "json" {message} {a}',
            )
            return ToolPlan(rules.grammar(f'{channel} "commentary " {lit(TRIGGER)} {call}'), immediate=True)
        # After "to=functions." in either header layout: the name, perhaps the channel,
        # perhaps the content type, then the arguments.
        call = named_alternatives(
            rules,
            chosen_tools(tools, choice),
            lambda t, a: f'{lit(t.name)} ({channel} "commentary")? " "? ({constrain}? "json")? {message} {a}',
        )
        return marked_plan(rules, call, TRIGGER, lambda _: None, False)

    def parser(self, tools: list[ToolSpec], finish_tool: str | None = None) -> ToolStreamParser:
        syntax = CallSyntax(openers=((HARMONY_CALL, ""),), program=_program)
        return ToolStreamParser(syntax, tools, finish_tool)

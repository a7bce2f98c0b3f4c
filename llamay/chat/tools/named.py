"""Tool calls written as a name, then the arguments as JSON, between markers.

- Mistral (v11+ tokenizers: Small 3.2, Devstral, Ministral, Magistral):
  `[TOOL_CALLS]NAME[ARGS]{...}`, with `[CALL_ID]ID` before `[ARGS]` where the template
  has call ids (Small 3.2); parallel calls repeat `[TOOL_CALLS]`.
- Functionary v3.1 (Llama 3.1): `<function=NAME>{...}</function>`, and `<|python_tag|>`
  followed by code for its code interpreter.
- Functionary v3.2: the prompt ends with `>>>`; the model names a recipient per line:
  `all\\n` then text for the user, or `NAME\\n{...}` for a call, the next one after `>>>`.
- DeepSeek R1: `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json
  \\n{...}\\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>`.
- DeepSeek V3.1: `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}
  <｜tool▁call▁end｜>...<｜tool▁calls▁end｜>`.
- Kimi K2: `<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0
  <|tool_call_argument_begin|>{...}<|tool_call_end|>...<|tool_calls_section_end|>`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Generator
from typing import Any

from .base import LarkRules, Special, TemplateFormat, ToolPlan, chosen_tools, lit, marked_plan, marker
from .block import CallSyntax
from .mistral import MistralFormat
from .params import NAME_LIMIT
from .program import Args, BlockIO, Call, Lit, Mismatch, Op, Opt, Program, Text, Until
from .spec import ToolChoice, ToolSpec
from .stream import ToolStreamParser

__all__ = [
    "CODE_TOOLS",
    "DeepSeekFormat",
    "FunctionaryV31Format",
    "FunctionaryV32Format",
    "KimiFormat",
    "MistralArgsFormat",
    "code_args",
    "named_alternatives",
]

# Tools that take raw code where a model writes code instead of JSON (`<|python_tag|>`).
CODE_TOOLS = ("python", "ipython", "code_interpreter")


def code_args(call: Call, stops: list[str]) -> Generator[Op, Any, str | None]:
    """Raw code up to one of `stops` (or the end) as the arguments `{"code": ...}`,
    streamed as it comes."""
    call.args('{"code": "')
    stop = yield Text(stops, lambda text: call.args(json.dumps(text, ensure_ascii=False)[1:-1]))
    call.args('"}')
    return stop


def code_tool(names: set[str]) -> str | None:
    """The offered tool that runs code, if any."""
    return next((n for n in CODE_TOOLS if n in names), None)


def named_alternatives(rules: LarkRules, tools: list[ToolSpec], one: Callable[[ToolSpec, str], str]) -> str:
    """One alternative per tool: `one(tool, args_rule)`."""
    alts = [rules.add(f"call_{i}", one(t, rules.args(i, t))) for i, t in enumerate(tools)]
    return rules.add("call", "(" + " | ".join(alts) + ")")


def _parser(program: Callable[..., Program], openers: tuple[str, ...], tools: list[ToolSpec],
            finish_tool: str | None, *, lead: bool = False, **kw: Any) -> ToolStreamParser:  # fmt: skip
    names = {t.name for t in tools}
    syntax = CallSyntax(
        openers=tuple((o, "") for o in openers),
        program=functools.partial(program, names=names, **kw),
        lead=lead,
    )
    return ToolStreamParser(syntax, tools, finish_tool)


# -- Mistral [TOOL_CALLS]NAME[ARGS] --------------------------------------------------

MISTRAL_CALLS, MISTRAL_ARGS, MISTRAL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"


def _mistral_program(io: BlockIO, opener: str, *, names: set[str]) -> Program:
    name, stop = yield Until([MISTRAL_ARGS, MISTRAL_ID], NAME_LIMIT)
    if stop == MISTRAL_ID:
        yield Until([MISTRAL_ARGS], 64)
    call = io.call(name.strip())
    yield Args(call)
    if not call.known:
        io.content(opener + io.raw)


class MistralArgsFormat(MistralFormat):
    """`[TOOL_CALLS]NAME[ARGS]{...}` per call; `call_ids`: `[CALL_ID]` and a 9-character id
    come before `[ARGS]` (the history's ids are mapped to such ids, see MistralFormat)."""

    def __init__(self, *, call_ids: bool = False) -> None:
        self.call_ids = call_ids
        self.name = "mistral_ids" if call_ids else "mistral_args"

    def plan(self, tools: list[ToolSpec], choice: ToolChoice, parallel: bool, special: Special) -> ToolPlan:
        rules = LarkRules()
        ident = f" {marker(MISTRAL_ID, special)} /[a-zA-Z0-9]{{9}}/" if self.call_ids else ""
        args = marker(MISTRAL_ARGS, special)
        call = named_alternatives(
            rules, chosen_tools(tools, choice), lambda t, a: f"{lit(t.name)}{ident} {args} {a}"
        )
        body = call + (f" ({marker(MISTRAL_CALLS, special)} {call})*" if parallel else "")
        return marked_plan(rules, body, MISTRAL_CALLS, special, choice.forced)

    def parser(self, tools: list[ToolSpec], finish_tool: str | None = None) -> ToolStreamParser:
        return _parser(_mistral_program, (MISTRAL_CALLS,), tools, finish_tool)


# -- Functionary v3.1 ----------------------------------------------------------------

F1_OPEN, F1_CLOSE, PYTHON_TAG = "<function=", "</function>", "<|python_tag|>"


def _functionary_v31_program(io: BlockIO, opener: str, *, names: set[str]) -> Program:
    if opener == PYTHON_TAG:
        tool = code_tool(names)
        if tool is None:
            raise Mismatch()
        yield from code_args(io.call(tool), [])
        return
    name, _ = yield Until([">"], NAME_LIMIT)
    call = io.call(name.strip())
    yield Args(call)
    yield Opt([F1_CLOSE])
    if not call.known:
        io.content(opener + io.raw)


class FunctionaryV31Format(TemplateFormat):
    """Functionary v3.1's `<function=NAME>{...}</function>` calls."""

    name = "functionary_v3_1"

    def plan(self, tools: list[ToolSpec], choice: ToolChoice, parallel: bool, special: Special) -> ToolPlan:
        rules = LarkRules()
        call = named_alternatives(
            rules, chosen_tools(tools, choice), lambda t, a: f"{lit(t.name + '>')} {a} {lit(F1_CLOSE)}"
        )
        body = call + (f" ({lit(F1_OPEN)} {call})*" if parallel else "")
        return marked_plan(rules, body, F1_OPEN, special, choice.forced)

    def parser(self, tools: list[ToolSpec], finish_tool: str | None = None) -> ToolStreamParser:
        return _parser(_functionary_v31_program, (F1_OPEN, PYTHON_TAG), tools, finish_tool)


# -- Functionary v3.2 ----------------------------------------------------------------

F2_NEXT, F2_ALL = ">>>", "all"


def _functionary_v32_program(io: BlockIO, opener: str, *, names: set[str]) -> Program:
    while True:
        recipient, _ = yield Until(["\n"], NAME_LIMIT)
        recipient = recipient.strip()
        if recipient == F2_ALL:
            stop = yield Text([F2_NEXT], io.content, trim=True)
            if stop is None:
                return
            continue
        start = len(io.raw) - len(recipient) - 1
        call = io.call(recipient)
        if recipient in CODE_TOOLS and call.known and (yield Opt(["{"], ws=True)) is None:
            stop = yield from code_args(call, [F2_NEXT])
            if stop is None:
                return
            continue
        yield Args(call)
        if not call.known:
            io.content(io.raw[max(0, start) :])
        if (yield Opt([F2_NEXT])) is None:
            return


class FunctionaryV32Format(TemplateFormat):
    """Functionary v3.2's recipient lines. The whole output is constrained (it starts
    at a recipient): forced, calls only; otherwise `all` and text, or calls."""

    name = "functionary_v3_2"

    def plan(self, tools: list[ToolSpec], choice: ToolChoice, parallel: bool, special: Special) -> ToolPlan:
        rules = LarkRules()
        call = named_alternatives(rules, chosen_tools(tools, choice), lambda t, a: f'{lit(t.name)} "\\n" {a}')
        calls = rules.add("calls", call + (f" ({lit(F2_NEXT)} {call})*" if parallel else ""))
        if choice.forced:
            return ToolPlan(rules.grammar(calls), immediate=True)
        # Text for the user holds no ">>>" (that starts the next recipient).
        text = rules.add("TEXT", "/(?s:[^>]*(>{1,2}[^>]+)*)/")
        return ToolPlan(
            rules.grammar(f'{lit(F2_ALL)} "\\n" {text} ({lit(F2_NEXT)} {calls})? | {calls}'), immediate=True
        )

    def parser(self, tools: list[ToolSpec], finish_tool: str | None = None) -> ToolStreamParser:
        return _parser(_functionary_v32_program, (), tools, finish_tool, lead=True)


# -- DeepSeek ------------------------------------------------------------------------

DS_CALLS, DS_CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
DS_CALL, DS_CALL_END, DS_SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


def _deepseek_program(io: BlockIO, opener: str, *, names: set[str], typed: bool) -> Program:
    while True:
        tag = yield Opt([DS_CALL, DS_CALLS_END])
        if tag is None:
            raise Mismatch()
        if tag == DS_CALLS_END:
            return
        start = len(io.raw) - len(DS_CALL)
        if typed:  # R1: the call's type ("function") comes first
            yield Until([DS_SEP], NAME_LIMIT)
            name, _ = yield Until(["\n", "```"], NAME_LIMIT)
        else:
            name, _ = yield Until([DS_SEP], NAME_LIMIT)
        call = io.call(name.strip())
        if typed:
            yield Opt(["```json", "json"])
        yield Args(call)
        if typed:
            yield Opt(["```"])
        yield Lit(DS_CALL_END)
        if not call.known:
            io.content(io.raw[start:])


class DeepSeekFormat(TemplateFormat):
    """DeepSeek's tool-call sections; `typed` (R1): `function<｜tool▁sep｜>NAME` and the
    arguments in a ```json fence; else (V3.1) `NAME<｜tool▁sep｜>` and bare JSON."""

    def __init__(self, *, typed: bool) -> None:
        self.typed = typed
        self.name = "deepseek_r1" if typed else "deepseek_v3_1"

    def plan(self, tools: list[ToolSpec], choice: ToolChoice, parallel: bool, special: Special) -> ToolPlan:
        rules = LarkRules()
        begin, sep, end = marker(DS_CALL, special), marker(DS_SEP, special), marker(DS_CALL_END, special)
        if self.typed:

            def one(t: ToolSpec, a: str) -> str:
                return f'{begin} "function" {sep} {lit(t.name)} "\\n```json\\n" {a} "\\n```" {end}'
        else:

            def one(t: ToolSpec, a: str) -> str:
                return f"{begin} {lit(t.name)} {sep} {a} {end}"

        call = named_alternatives(rules, chosen_tools(tools, choice), one)
        more = f' ("\\n"? {call})*' if parallel else ""
        body = f"{call}{more} {marker(DS_CALLS_END, special)}"
        return marked_plan(rules, body, DS_CALLS, special, choice.forced)

    def parser(self, tools: list[ToolSpec], finish_tool: str | None = None) -> ToolStreamParser:
        return _parser(_deepseek_program, (DS_CALLS,), tools, finish_tool, typed=self.typed)


# -- Kimi K2 -------------------------------------------------------------------------

K_SECTION, K_SECTION_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
K_CALL, K_ARGS, K_CALL_END = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"


def _kimi_program(io: BlockIO, opener: str, *, names: set[str]) -> Program:
    sectioned = opener == K_SECTION
    tag: str | None = None if sectioned else K_CALL
    while True:
        if tag is None:
            tag = yield Opt([K_CALL, K_SECTION_END] if sectioned else [K_CALL])
            if tag is None and sectioned:
                raise Mismatch()
        if tag is None or tag == K_SECTION_END:
            return
        # The call's text, for a name that is not a tool: from its marker on.
        prefix, start = (opener, 0) if not io.raw else ("", len(io.raw) - len(K_CALL))
        ident, _ = yield Until([K_ARGS], NAME_LIMIT)
        call = io.call(kimi_name(ident))
        yield Args(call)
        yield Opt([K_CALL_END])  # left out by some, before the next call
        if not call.known:
            io.content(prefix + io.raw[start:])
        tag = None


def kimi_name(ident: str) -> str:
    """`functions.NAME:0` -> NAME."""
    name = ident.strip()
    name = name.removeprefix("functions.")
    head, colon, index = name.rpartition(":")
    return head if colon and index.isdigit() else name


class KimiFormat(TemplateFormat):
    """Kimi K2's tool-call sections. History ids become the template's own
    `functions.NAME:N` (its results name them); `per_message`: N counts within each
    assistant message (the first K2 template), else across the conversation."""

    interrupts = (K_SECTION, K_CALL)

    def __init__(self, *, per_message: bool = False) -> None:
        self.name = "kimi_k2"
        self.per_message = per_message

    def prepare(
        self, messages: list[dict[str, Any]], tools: list[ToolSpec]
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        out, extra = super().prepare(messages, tools)
        ids: dict[str, str] = {}
        counter = 0
        for m in out:
            calls = m.get("tool_calls") or []
            if m["role"] == "assistant" and calls:
                if self.per_message:
                    counter = 0
                for c in calls:
                    fn = c.get("function") if isinstance(c, dict) else None
                    if isinstance(fn, dict) and c.get("id") is not None:
                        ids[str(c["id"])] = f"functions.{fn.get('name')}:{counter}"
                    counter += 1
            elif m["role"] == "tool" and str(m.get("tool_call_id")) in ids:
                m["tool_call_id"] = ids[str(m["tool_call_id"])]
        return out, extra

    def plan(self, tools: list[ToolSpec], choice: ToolChoice, parallel: bool, special: Special) -> ToolPlan:
        rules = LarkRules()
        begin, args, end = marker(K_CALL, special), marker(K_ARGS, special), marker(K_CALL_END, special)
        call = named_alternatives(
            rules,
            chosen_tools(tools, choice),
            lambda t, a: f"{begin} {lit('functions.' + t.name + ':')} /[0-9]{{1,3}}/ {args} {a} {end}",
        )
        body = f"{call}{'+' if parallel else ''} {marker(K_SECTION_END, special)}"
        return marked_plan(rules, body, K_SECTION, special, choice.forced)

    def parser(self, tools: list[ToolSpec], finish_tool: str | None = None) -> ToolStreamParser:
        return _parser(_kimi_program, (K_SECTION, K_CALL), tools, finish_tool)

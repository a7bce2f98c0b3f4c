"""Tool calls whose arguments are tagged one parameter at a time.

- Qwen3-Coder, Qwen 3.5 (and Nemotron 3): `<tool_call>\\n<function=NAME>\\n<parameter=K>\\n
  VALUE\\n</parameter>\\n...</function>\\n</tool_call>`; some models leave out the opening
  `<tool_call>`, so `<function=` opens a call too.
- GLM 4.5 / 4.6: `<tool_call>NAME\\n<arg_key>K</arg_key>\\n<arg_value>VALUE</arg_value>\\n...
  </tool_call>`.
- MiniMax M2: `<minimax:tool_call>\\n<invoke name="NAME">\\n<parameter name="K">VALUE
  </parameter>\\n...</invoke>\\n...</minimax:tool_call>` (several invokes in one block).

Values are text or JSON by the parameter's schema (see params.py). Parallel calls are
consecutive blocks (Qwen, GLM) or invokes (MiniMax). The grammars follow the templates'
own layout, newline for newline.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from .base import (
    LarkRules,
    Special,
    TemplateFormat,
    ToolPlan,
    chosen_tools,
    lit,
    marked_plan,
    marker,
    raw_until,
)
from .block import CallSyntax
from .params import NAME_LIMIT, param_schemas, params_rule, tagged_params, value_rule
from .program import BlockIO, Lit, Mismatch, Opt, Program, Until
from .spec import ToolChoice, ToolSpec
from .stream import ToolStreamParser

__all__ = ["GlmFormat", "MiniMaxFormat", "QwenXmlFormat"]


def _schemas(tools: dict[str, ToolSpec], name: str) -> dict[str, Any]:
    tool = tools.get(name)
    return param_schemas(tool) if tool is not None else {}


def _parser(program: Callable[..., Program], openers: tuple[str, ...], tools: list[ToolSpec],
            finish_tool: str | None) -> ToolStreamParser:  # fmt: skip
    by_name = {t.name: t for t in tools}
    syntax = CallSyntax(
        openers=tuple((o, "") for o in openers), program=functools.partial(program, tools=by_name)
    )
    return ToolStreamParser(syntax, tools, finish_tool)


def _tool_alternatives(rules: LarkRules, tools: list[ToolSpec], one: Callable[[int, ToolSpec], str]) -> str:
    return "(" + " | ".join(rules.add(f"call_{i}", one(i, t)) for i, t in enumerate(tools)) + ")"


# -- Qwen3-Coder ---------------------------------------------------------------------

Q_OPEN, Q_CLOSE, Q_FUNCTION = "<tool_call>", "</tool_call>", "<function="
Q_VALUE_END = "\n</parameter>\n"


def _qwen_program(io: BlockIO, opener: str, *, tools: dict[str, ToolSpec]) -> Program:
    if opener == Q_OPEN:
        yield Lit(Q_FUNCTION)
    name, _ = yield Until([">"], NAME_LIMIT)
    call = io.call(name.strip())
    yield from tagged_params(
        call, _schemas(tools, name.strip()), "<parameter=", ">", "</parameter>", "</function>"
    )
    yield Opt([Q_CLOSE])
    if not call.known:  # not a tool of the request: its text is content
        io.content(opener + io.raw)


class QwenXmlFormat(TemplateFormat):
    """Qwen3-Coder's XML calls, one `<tool_call>` block each."""

    name = "qwen3_coder"

    def plan(self, tools: list[ToolSpec], choice: ToolChoice, parallel: bool, special: Special) -> ToolPlan:
        rules = LarkRules()
        raw = raw_until(rules, Q_VALUE_END, special)

        def param(tool: ToolSpec) -> Callable[[str, Any], str]:
            def one(key: str, prop: Any) -> str:
                value = value_rule(prop, tool.parameters, end=lit(Q_VALUE_END), raw=raw, forced=choice.forced)
                return f"{lit(f'<parameter={key}>' + chr(10))} {value}"

            return one

        call = _tool_alternatives(
            rules,
            chosen_tools(tools, choice),
            lambda i, t: (
                f"{lit(f'{Q_FUNCTION}{t.name}>' + chr(10))} {params_rule(t, param(t))} {lit('</function>')}"
            ),
        )
        close = marker(Q_CLOSE, special)
        body = f'"\\n" {call} "\\n" {close}'
        if parallel:
            body += f' ("\\n" {marker(Q_OPEN, special)} "\\n" {call} "\\n" {close})*'
        return marked_plan(rules, body, Q_OPEN, special, choice.forced)

    def parser(self, tools: list[ToolSpec], finish_tool: str | None = None) -> ToolStreamParser:
        return _parser(_qwen_program, (Q_OPEN, Q_FUNCTION), tools, finish_tool)


# -- GLM -----------------------------------------------------------------------------

G_OPEN, G_CLOSE = "<tool_call>", "</tool_call>"
G_KEY, G_KEY_END, G_VALUE, G_VALUE_END = "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"


def _glm_program(io: BlockIO, opener: str, *, tools: dict[str, ToolSpec]) -> Program:
    name, stop = yield Until(["\n", G_KEY, G_CLOSE], NAME_LIMIT)
    name = name.strip()
    if not name:
        raise Mismatch()
    call = io.call(name)
    if stop != G_CLOSE:
        params = _glm_params(call, _schemas(tools, name), opened=stop == G_KEY)
        yield from params
    else:
        call.args("{}")
    if not call.known:
        io.content(opener + io.raw)


def _glm_params(call: Any, schemas: dict[str, Any], *, opened: bool) -> Program:
    # `<arg_key>K</arg_key>` then `<arg_value>V</arg_value>`: the value's opening tag
    # belongs to the key's end as far as tagged_params is concerned.
    yield from tagged_params(
        call, schemas, G_KEY, G_KEY_END, G_VALUE_END, G_CLOSE, opened=opened, value_open=G_VALUE
    )


class GlmFormat(TemplateFormat):
    """GLM's `<tool_call>NAME` calls with `<arg_key>`/`<arg_value>` pairs."""

    name = "glm"

    def plan(self, tools: list[ToolSpec], choice: ToolChoice, parallel: bool, special: Special) -> ToolPlan:
        rules = LarkRules()
        value_end = marker(G_VALUE_END, special)
        raw = raw_until(rules, G_VALUE_END, special)
        key, key_end, value_open = (
            marker(G_KEY, special),
            marker(G_KEY_END, special),
            marker(G_VALUE, special),
        )

        def param(tool: ToolSpec) -> Callable[[str, Any], str]:
            def one(name: str, prop: Any) -> str:
                value = value_rule(prop, tool.parameters, end=value_end, raw=raw, forced=choice.forced)
                return f'{key} {lit(name)} {key_end} "\\n" {value_open} {value} "\\n"'

            return one

        call = _tool_alternatives(
            rules, chosen_tools(tools, choice), lambda i, t: f'{lit(t.name)} "\\n" {params_rule(t, param(t))}'
        )
        close = marker(G_CLOSE, special)
        body = f"{call} {close}"
        if parallel:
            body += f' ("\\n" {marker(G_OPEN, special)} {call} {close})*'
        return marked_plan(rules, body, G_OPEN, special, choice.forced)

    def parser(self, tools: list[ToolSpec], finish_tool: str | None = None) -> ToolStreamParser:
        return _parser(_glm_program, (G_OPEN,), tools, finish_tool)


# -- MiniMax M2 ----------------------------------------------------------------------

M_OPEN, M_CLOSE = "<minimax:tool_call>", "</minimax:tool_call>"
M_INVOKE, M_INVOKE_END = '<invoke name="', "</invoke>"
M_PARAM, M_PARAM_END = '<parameter name="', "</parameter>"


def _minimax_program(io: BlockIO, opener: str, *, tools: dict[str, ToolSpec]) -> Program:
    while True:
        tag = yield Opt([M_INVOKE, M_CLOSE])
        if tag is None:
            raise Mismatch()
        if tag == M_CLOSE:
            return
        start = len(io.raw) - len(M_INVOKE)
        name, _ = yield Until(['">'], NAME_LIMIT)
        call = io.call(name)
        yield from tagged_params(call, _schemas(tools, name), M_PARAM, '">', M_PARAM_END, M_INVOKE_END)
        if not call.known:
            io.content(io.raw[start:])


class MiniMaxFormat(TemplateFormat):
    """MiniMax M2's `<invoke>` calls inside one `<minimax:tool_call>` block."""

    name = "minimax"

    def plan(self, tools: list[ToolSpec], choice: ToolChoice, parallel: bool, special: Special) -> ToolPlan:
        rules = LarkRules()
        raw = raw_until(rules, M_PARAM_END, special)
        end = lit(M_PARAM_END)

        def param(tool: ToolSpec) -> Callable[[str, Any], str]:
            def one(name: str, prop: Any) -> str:
                value = value_rule(prop, tool.parameters, end=end, raw=raw, forced=choice.forced)
                return f'{lit(M_PARAM + name + chr(34) + ">")} {value} "\\n"'

            return one

        call = _tool_alternatives(
            rules,
            chosen_tools(tools, choice),
            lambda i, t: (
                f'{lit(M_INVOKE + t.name + chr(34) + ">")} "\\n" {params_rule(t, param(t))} {lit(M_INVOKE_END)} "\\n"'
            ),
        )
        body = f'"\\n" {call}{"+" if parallel else ""} {marker(M_CLOSE, special)}'
        return marked_plan(rules, body, M_OPEN, special, choice.forced)

    def parser(self, tools: list[ToolSpec], finish_tool: str | None = None) -> ToolStreamParser:
        return _parser(_minimax_program, (M_OPEN,), tools, finish_tool)

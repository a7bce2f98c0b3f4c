"""Tool names as Ollama takes them ("weather.get", spaces, any letters): accepted on the
Ollama route only, planned into every format's grammar, and read back from a call."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llamay.api.ollama.schemas import parse_chat
from llamay.chat.tools import FORMATS, ToolChoice, parse_tools
from llamay.chat.tools.spec import MAX_LOOSE_NAME
from llamay.errors import InvalidRequest
from llamay.grammar import Constraint, byte_compile_cache

NAMES = ["weather.get", "web search", "m\u00e9t\u00e9o", 'say "hi"\\now', "<tool_call>", "x" * MAX_LOOSE_NAME]
MARKER = {"hermes": "<tool_call>", "mistral": "[TOOL_CALLS]", "llama3": '{"name": "'}


def ollama_tools(*names: str) -> list[dict[str, Any]]:
    return [{"function": {"name": n, "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}
            for n in names]  # fmt: skip


def test_ollama_accepts_its_names() -> None:
    req = parse_chat({"model": "m", "messages": [], "tools": ollama_tools(*NAMES)})
    assert [t.name for t in req.tools] == NAMES


@pytest.mark.parametrize(
    "name", ["", "x" * (MAX_LOOSE_NAME + 1), "line\nbreak", "tab\there", "nul\x00", "del\x7f", "half\ud800"]
)
def test_ollama_refuses_empty_long_and_control_names(name: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        parse_chat({"model": "m", "messages": [], "tools": ollama_tools(name)})
    assert e.value.param == "tools[0].function.name"


def test_openai_keeps_openais_rule() -> None:
    with pytest.raises(InvalidRequest):
        parse_tools([{"type": "function", "function": {"name": "weather.get"}}])


def accepts(plan: Any, text: str) -> bool:
    constraint = Constraint(plan.grammar, byte_compile_cache())
    return all(constraint.consume(t) for t in text.encode()) and constraint.is_accepting()


def call_text(fmt: str, name: str) -> str:
    key = "parameters" if fmt == "llama3" else "arguments"
    body = f'{{"name": {json.dumps(name)}, "{key}": {{"a": 1}}}}'
    if fmt == "hermes":
        return f"<tool_call>\n{body}\n</tool_call>"
    if fmt == "mistral":
        return f"[TOOL_CALLS] [{body}]"
    return body


@pytest.mark.parametrize("fmt", ["hermes", "mistral", "llama3"])
def test_loose_names_plan_and_parse(fmt: str) -> None:
    tools = parse_chat({"model": "m", "messages": [], "tools": ollama_tools(*NAMES[:-1])}).tools
    plan = FORMATS[fmt].plan(tools, ToolChoice("required"), False, lambda _: None)
    for tool in tools:
        text = call_text(fmt, tool.name)
        assert accepts(plan, text), text
        parser = FORMATS[fmt].parser(tools)
        parser.push(text)
        parser.finish()
        assert [(c.name, json.loads(c.arguments)) for c in parser.calls] == [(tool.name, {"a": 1})]
    assert not accepts(plan, call_text(fmt, "weather"))  # only the names offered

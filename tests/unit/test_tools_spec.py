"""parse_tools / parse_tool_choice: validation and the field each error names."""

from __future__ import annotations

from typing import Any

import pytest

from llamay.chat.tools import FINISH_TOOL, ToolChoice, ToolSpec, parse_tool_choice, parse_tools
from llamay.chat.tools.spec import args_rule, openai_tools
from llamay.errors import GrammarError, InvalidRequest


def fn(name: str = "get_weather", **extra: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, **extra}}


WEATHER = fn(
    description="Current weather",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def test_parse_tools_valid() -> None:
    specs = parse_tools(
        [WEATHER, fn("no_params"), fn("strict_one", strict=True, parameters={"type": "object"})]
    )
    assert specs[0] == ToolSpec("get_weather", "Current weather", WEATHER["function"]["parameters"], True)
    assert specs[1].parameters == {"type": "object", "properties": {}}
    assert specs[1].description == ""
    assert specs[2].strict is True
    assert parse_tools(None) == []
    assert parse_tools([]) == []


@pytest.mark.parametrize(
    ("tools", "param"),
    [
        ("nope", "tools"),
        ({"type": "function"}, "tools"),
        ([1], "tools[0]"),
        ([{"type": "retrieval", "function": {"name": "x"}}], "tools[0].type"),
        ([{"type": "function"}], "tools[0].function"),
        ([fn("has space")], "tools[0].function.name"),
        ([fn("x" * 65)], "tools[0].function.name"),
        ([fn("")], "tools[0].function.name"),
        ([{"type": "function", "function": {"name": 3}}], "tools[0].function.name"),
        ([WEATHER, fn("get_weather")], "tools[1].function.name"),
        ([fn("a", description=5)], "tools[0].function.description"),
        ([fn("a", strict="yes")], "tools[0].function.strict"),
        ([fn("a", parameters=[1])], "tools[0].function.parameters"),
        ([fn("a"), fn("b", parameters={"type": "string"})], "tools[1].function.parameters"),
        (
            [
                fn(
                    "a",
                    parameters={
                        "type": "object",
                        "properties": {"x": {"type": "array", "uniqueItems": True}},
                    },
                    strict=True,
                )
            ],
            "tools[0].function.parameters",
        ),  # fmt: skip
        ([fn("a", parameters={"type": "object", "required": "x"})], "tools[0].function.parameters"),
        ([fn(f"t{i}") for i in range(129)], "tools"),
    ],
)
def test_parse_tools_errors_name_the_field(tools: Any, param: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        parse_tools(tools)
    assert e.value.param == param


def test_schema_error_is_a_grammar_error() -> None:
    bad = fn(
        "a",
        strict=True,
        parameters={"type": "object", "properties": {"u": {"type": "array", "uniqueItems": True}}},
    )
    with pytest.raises(GrammarError) as e:
        parse_tools([bad])
    assert e.value.param == "tools[0].function.parameters"


def test_unenforceable_keywords_are_refused_even_without_strict() -> None:
    # A call either fits its tool's signature or is not produced; annotations (an unknown
    # format, a vendor keyword) are no reason to refuse.
    loose = fn(
        "a", parameters={"type": "object", "properties": {"u": {"type": "array", "contains": {"const": 1}}}}
    )
    with pytest.raises(GrammarError) as e:
        parse_tools([loose])
    assert "contains" in e.value.message and e.value.param == "tools[0].function.parameters"
    fine = fn(
        "a",
        parameters={"type": "object", "properties": {"u": {"type": "string", "format": "bogus", "x-ui": 1}}},
    )
    assert parse_tools([fine])[0].name == "a"


def test_custom_param_prefix() -> None:
    with pytest.raises(InvalidRequest) as e:
        parse_tools([fn("bad name")], param="body.tools")
    assert e.value.param == "body.tools[0].function.name"


def test_tool_choice() -> None:
    tools = parse_tools([WEATHER])
    assert parse_tool_choice(None, tools) == ToolChoice("auto")
    assert parse_tool_choice(None, []) == ToolChoice("none")
    assert parse_tool_choice("none", tools) == ToolChoice("none")
    assert parse_tool_choice("required", tools).forced
    named = parse_tool_choice({"type": "function", "function": {"name": "get_weather"}}, tools)
    assert named == ToolChoice("function", "get_weather") and named.forced
    assert not ToolChoice("auto").forced


@pytest.mark.parametrize(
    "value",
    [
        "always",
        5,
        {"type": "function", "function": {"name": "unknown"}},
        {"type": "function"},
        {"type": "tool", "function": {"name": "get_weather"}},
        {"type": "function", "function": {"name": 1}},
    ],
)
def test_tool_choice_errors(value: Any) -> None:
    with pytest.raises(InvalidRequest) as e:
        parse_tool_choice(value, parse_tools([WEATHER]))
    assert e.value.param == "tool_choice"


def test_forced_choice_needs_tools() -> None:
    with pytest.raises(InvalidRequest) as e:
        parse_tool_choice("required", [])
    assert e.value.param == "tool_choice"


def test_finish_tool_and_openai_shape() -> None:
    assert args_rule(FINISH_TOOL).startswith("%json ")
    shaped = openai_tools([FINISH_TOOL, ToolSpec("bare")])
    assert shaped[0]["function"]["name"] == "finish" and "description" in shaped[0]["function"]
    assert shaped[1] == {
        "type": "function",
        "function": {"name": "bare", "parameters": {"type": "object", "properties": {}}},
    }

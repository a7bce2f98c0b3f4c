"""Anthropic request parsing: content blocks to chat messages (golden JSON), tools,
tool_choice, thinking, structured output, cache breakpoints and the errors that name
the field at fault."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llamay.api.anthropic.cache import last_breakpoint
from llamay.api.anthropic.content import MARK, chat_messages
from llamay.api.anthropic.schemas import parse_messages_request
from llamay.api.errors import error_body
from llamay.chat.tools import ToolChoice
from llamay.engine.scheduler import common_prefix
from llamay.errors import GrammarError, InvalidRequest, ThreadUnsupported, Unsupported

WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def body(**kw: Any) -> dict[str, Any]:
    return {"model": "", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}], **kw}


def test_a_tool_round_trip_conversation_becomes_openai_messages() -> None:
    system = [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use tools."}]
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Need the tool.", "signature": "sig"},
                {"type": "redacted_thinking", "data": "xx"},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": "21C"}],
                },
                {"type": "text", "text": "And tomorrow?"},
            ],
        },
    ]
    got = chat_messages(system, messages)
    assert got.prefill is None
    assert got.messages == [
        {
            "role": "system",
            "content": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use tools."}],
        },
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Checking."}],
            "reasoning_content": "Need the tool.",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "21C", "name": "get_weather"},
        {"role": "user", "content": [{"type": "text", "text": "And tomorrow?"}]},
    ]


def test_tool_only_assistant_turn_has_null_content_and_results_need_no_text() -> None:
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t", "content": "done", "is_error": True}],
        },
    ]
    got = chat_messages(None, messages).messages
    assert got[1]["content"] is None and got[1]["tool_calls"][0]["function"]["arguments"] == "{}"
    assert got[2:] == [{"role": "tool", "tool_call_id": "t", "content": "done", "name": "f"}]


def test_system_role_messages_stay_where_they_are() -> None:
    messages = [
        {"role": "user", "content": "a"},
        {"role": "system", "content": [{"type": "text", "text": "b"}]},
    ]
    assert chat_messages(None, messages).messages == [
        {"role": "user", "content": [{"type": "text", "text": "a"}]},
        {"role": "system", "content": [{"type": "text", "text": "b"}]},
    ]


def test_a_final_assistant_text_is_a_prefill() -> None:
    messages = [
        {"role": "user", "content": "JSON please"},
        {"role": "assistant", "content": [{"type": "text", "text": "{"}]},
    ]
    got = chat_messages("sys", messages)
    assert got.prefill == "{"
    assert got.messages == [
        {"role": "system", "content": [{"type": "text", "text": "sys"}]},
        {"role": "user", "content": [{"type": "text", "text": "JSON please"}]},
    ]


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ([{"role": "tool", "content": "x"}], "messages[0].role"),
        ([{"role": "system", "content": [{"type": "tool_result"}]}], "messages[0].content[0].type"),
        ([{"role": "user"}], "messages[0].content"),
        ([{"role": "user", "content": 5}], "messages[0].content"),
        ([{"role": "user", "content": [{"type": "image", "source": {}}]}], "messages[0].content[0]"),
        ([{"role": "user", "content": [{"type": "tool_result"}]}], "messages[0].content[0].tool_use_id"),
        ([{"role": "user", "content": [{"type": "text"}]}], "messages[0].content[0].text"),
        (
            [{"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "b", "input": {}}]}],
            "messages[0].content[0].type",
        ),
        (
            [
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "b", "input": 3}]},
            ],
            "messages[1].content[0].input",
        ),
        ([], "messages"),
    ],
)
def test_content_errors_name_the_field(messages: list[Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        chat_messages(None, messages)
    assert e.value.param == param


def test_request_fields() -> None:
    req = parse_messages_request(
        body(
            stop_sequences=["##", "", "##", "END"],
            stream=True,
            metadata={"user_id": "u1"},
            top_k=5,
            temperature=0,
        )
    )
    assert req.stop == ("##", "END") and req.stream and req.max_tokens == 16
    assert req.sampling.top_k == 5 and req.sampling.greedy
    assert not req.options.thinking and req.options.finish_tool is False
    assert req.options.tool_choice == ToolChoice("none") and req.marked is None


def test_max_tokens_is_required_except_for_counting() -> None:
    with pytest.raises(InvalidRequest) as e:
        parse_messages_request({"model": "", "messages": [{"role": "user", "content": "x"}]})
    assert e.value.param == "max_tokens"
    req = parse_messages_request(
        {"model": "", "messages": [{"role": "user", "content": "x"}], "stream": True}, counting=True
    )
    assert req.max_tokens is None and not req.stream


@pytest.mark.parametrize(
    ("choice", "want", "parallel"),
    [
        (None, ToolChoice("auto"), None),  # unsaid: the model's template decides
        ({"type": "auto"}, ToolChoice("auto"), None),
        ({"type": "any", "disable_parallel_tool_use": True}, ToolChoice("required"), False),
        ({"type": "any", "disable_parallel_tool_use": False}, ToolChoice("required"), True),
        ({"type": "tool", "name": "get_weather"}, ToolChoice("function", "get_weather"), None),
        ({"type": "none"}, ToolChoice("none"), None),
    ],
)
def test_tool_choice(choice: Any, want: ToolChoice, parallel: bool | None) -> None:
    req = parse_messages_request(body(tools=[WEATHER], **({"tool_choice": choice} if choice else {})))
    assert req.options.tool_choice == want and req.options.parallel_tool_calls is parallel
    spec = req.options.tools[0]
    assert (spec.name, spec.description, spec.parameters) == (
        "get_weather",
        "Weather for a city",
        WEATHER["input_schema"],
    )


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tools": [{**WEATHER, "name": "bad name"}]}, "tools[0].name"),
        ({"tools": [{"name": "x"}]}, "tools[0].input_schema"),
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type"),
        ({"tools": [WEATHER, WEATHER]}, "tools[1].name"),
        ({"tools": [WEATHER], "tool_choice": {"type": "tool", "name": "nope"}}, "tool_choice.name"),
        ({"tool_choice": {"type": "any"}}, "tool_choice"),
        ({"tool_choice": {"type": "maybe"}, "tools": [WEATHER]}, "tool_choice.type"),
        ({"thinking": {"type": "enabled"}}, "thinking.budget_tokens"),
        ({"thinking": {"type": "enabled", "budget_tokens": 0}}, "thinking.budget_tokens"),
        ({"thinking": {"type": "sometimes"}}, "thinking.type"),
        ({"temperature": 3}, "temperature"),
        ({"stop_sequences": "##"}, "stop_sequences"),
        ({"stop_sequences": [1]}, "stop_sequences"),
        ({"metadata": {"user_id": 3}}, "metadata.user_id"),
        ({"output_config": {"format": {"type": "xml"}}}, "output_config.format.type"),
        ({"system": [{"type": "image"}]}, "system[0]"),
        ({"cache_control": {"type": "forever"}}, "cache_control.type"),
    ],
)
def test_request_errors_name_the_field(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        parse_messages_request(body(**fields))
    assert e.value.param == param
    assert param.split("[")[0].split(".")[0] in e.value.message


def test_tool_schema_errors_use_anthropic_paths() -> None:
    bad = {
        "name": "x",
        "input_schema": {"type": "object", "properties": {"a": {"type": "array", "uniqueItems": True}}},
    }
    with pytest.raises(GrammarError) as e:
        parse_messages_request(body(tools=[bad]))
    assert e.value.param == "tools[0].input_schema" and "function" not in e.value.message


def test_thinking_modes() -> None:
    on = parse_messages_request(body(max_tokens=64, thinking={"type": "enabled", "budget_tokens": 8}))
    assert on.options.thinking and on.options.thinking_budget == 8 and on.thinking.shown
    hidden = parse_messages_request(body(thinking={"type": "adaptive", "display": "omitted"}))
    assert hidden.options.thinking and hidden.options.thinking_budget is None and not hidden.thinking.shown
    assert not parse_messages_request(body(thinking={"type": "disabled"})).options.thinking
    prefill = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]
    with pytest.raises(InvalidRequest, match="prefill"):
        parse_messages_request(body(messages=prefill, thinking={"type": "adaptive"}))


def test_structured_output() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    req = parse_messages_request(body(output_config={"format": {"type": "json_schema", "schema": schema}}))
    assert req.options.grammar is not None
    assert parse_messages_request(
        body(output_format={"type": "json_schema", "schema": schema})
    ).options.grammar


def test_the_last_cache_breakpoint_is_marked() -> None:
    cc = {"type": "ephemeral"}
    messages = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "doc", "cache_control": cc}, {"type": "text", "text": "q"}],
        },
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "next"},
    ]
    tools = [{**WEATHER, "cache_control": cc}]
    system = [{"type": "text", "text": "long system", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    req = parse_messages_request(body(messages=messages, tools=tools, system=system))
    assert req.marked is not None
    opts, prefill = req.marked
    assert prefill is None and opts.tools == req.options.tools
    assert json.dumps(opts.messages, ensure_ascii=False).count(MARK) == 1
    assert opts.messages[1]["content"][0]["text"] == "doc" + MARK
    assert MARK not in json.dumps(req.options.messages, ensure_ascii=False)
    # A breakpoint on a tool only: its description carries the mark.
    only_tool = parse_messages_request(body(tools=tools))
    assert only_tool.marked is not None and only_tool.marked[0].tools[0].description.endswith(MARK)
    # Top-level cache_control: the last block of the last message.
    top = parse_messages_request(body(messages=messages, cache_control=cc))
    assert top.marked is not None and top.marked[0].messages[-1]["content"][0]["text"] == "next" + MARK


def test_breakpoint_limits_and_spots() -> None:
    cc = {"type": "ephemeral"}
    blocks = [{"type": "text", "text": str(i), "cache_control": cc} for i in range(5)]
    with pytest.raises(InvalidRequest, match="at most 4"):
        last_breakpoint(None, None, [{"role": "user", "content": blocks}], None)
    assert last_breakpoint(None, blocks[:1], [{"role": "user", "content": "x"}], None) == ("system", 0, 0)
    assert last_breakpoint(None, None, [{"role": "user", "content": "x"}], None) is None
    assert common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2 and common_prefix([], [1]) == 0


def test_seed_is_taken_and_checked() -> None:
    base = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    assert parse_messages_request({**base, "seed": 7}).sampling.seed == 7
    assert parse_messages_request(base).sampling.seed is None
    with pytest.raises(InvalidRequest) as err:
        parse_messages_request({**base, "seed": "seven"})
    assert err.value.param == "seed"


def test_thread_is_refused_with_the_code_the_sdks_fall_back_from() -> None:
    base = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    for thread in ({"type": "create"}, {"type": "continue", "previous_message_id": "msg_1"}):
        with pytest.raises(ThreadUnsupported) as e:
            parse_messages_request({**base, "thread": thread})
        assert e.value.param == "thread" and e.value.code == "thread_unsupported_request"
    body = error_body(ThreadUnsupported("no threads", param="thread"), "anthropic")
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["details"] == {"error_code": "thread_unsupported_request"}
    assert parse_messages_request({**base, "thread": None}).max_tokens == 5  # null: no thread


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("mcp_servers", [{"type": "url", "url": "https://example.com/sse", "name": "x"}]),
        ("container", "container_1"),
        ("context_management", {"edits": [{"type": "clear_tool_uses_20250919"}]}),
        ("compaction", {"trigger": 1000}),
    ],
)
def test_fields_that_change_the_meaning_are_refused_by_name(field: str, value: Any) -> None:
    base = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    with pytest.raises(Unsupported) as e:
        parse_messages_request({**base, field: value})
    assert e.value.param == field and field in e.value.message and e.value.status == 400
    assert parse_messages_request({**base, "mcp_servers": []}).max_tokens == 5  # nothing asked

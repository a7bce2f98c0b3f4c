"""The Responses API's pure parts: request parsing, conversation messages, paging, and the
builder's events and response object, validated against the openai package's own types."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest
from openai.types.responses import Response, ResponseItemList, ResponseStreamEvent

from llamay.api.openai.responses_render import ResponseBuilder, base_json
from llamay.api.openai.responses_schema import conversation_messages, parse_responses
from llamay.api.openai.responses_store import page
from llamay.chat.flow import Piece
from llamay.chat.pipeline import Choice
from llamay.chat.tools import ToolCall
from llamay.errors import InvalidRequest
from llamay.types import FinishEvent, TokenEvent, TopLogprob, Usage

EVENT = pydantic.TypeAdapter(ResponseStreamEvent)
TOOL = {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}}


def choice(reason: str, calls: list[ToolCall] | None = None, message: str | None = None) -> Choice:
    fin = FinishEvent(reason, Usage(10, 6, 4), message=message)  # type: ignore[arg-type]
    return Choice(0, "", "", "", calls or [], fin)


def build(
    steps: list[list[Piece]],
    reason: str = "stop",
    *,
    summary: bool = False,
    calls: list[ToolCall] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    req = parse_responses({"model": "m", "input": "hi", "tools": [TOOL]})
    b = ResponseBuilder(base_json("resp_1", "m", req), summary=summary)
    events = b.start()
    for pieces in steps:
        events += b.push(pieces)
    final, last = b.finish(choice(reason, calls), [])
    return final, events + last


def check_events(events: list[dict[str, Any]]) -> list[str]:
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    for e in events:
        EVENT.validate_python(e)
    return [e["type"] for e in events]


def test_text_events_in_order_and_final_response_validates() -> None:
    final, events = build([[Piece("content", "Hel")], [Piece("content", "lo")]])
    types = check_events(events)
    assert types == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.completed",
    ]  # fmt: skip
    r = Response.model_validate(final)
    assert r.output_text == "Hello" and r.status == "completed" and r.usage is not None
    assert r.usage.input_tokens_details.cached_tokens == 4 and r.usage.total_tokens == 16
    assert events[-1]["response"] == final and events[0]["response"]["output"] == []


def test_reasoning_then_whitespace_then_a_call() -> None:
    call = ToolCall("call_1", "get_time", '{"zone": "UTC"}')
    steps = [
        [Piece("reasoning", "think")],
        [Piece("reasoning", "ing")],
        [Piece("content", "\n")],
        [Piece("call", index=0, id="call_1", name="get_time")],
        [Piece("args", '{"zone": ', index=0)],
        [Piece("args", '"UTC"}', index=0)],
    ]
    final, events = build(steps, calls=[call])
    types = check_events(events)
    assert "response.reasoning_text.delta" in types and "response.function_call_arguments.done" in types
    r = Response.model_validate(final)
    kinds = [o.type for o in r.output]
    assert kinds == ["reasoning", "function_call"]  # the newline opened no message
    reasoning, fc = final["output"]
    assert (
        reasoning["content"] == [{"type": "reasoning_text", "text": "thinking"}]
        and reasoning["summary"] == []
    )
    assert fc["arguments"] == '{"zone": "UTC"}' and fc["call_id"] == "call_1" and fc["status"] == "completed"
    assert r.usage is not None and r.usage.output_tokens_details.reasoning_tokens == 2


def test_summary_mode_and_incomplete() -> None:
    final, events = build([[Piece("reasoning", "hmm")], [Piece("content", "an")]], "length", summary=True)
    types = check_events(events)
    assert types.index("response.reasoning_summary_part.added") < types.index(
        "response.reasoning_summary_text.delta"
    )
    assert types[-1] == "response.incomplete"
    assert final["output"][0]["summary"] == [{"type": "summary_text", "text": "hmm"}]
    assert final["output"][1]["status"] == "incomplete"
    assert final["incomplete_details"] == {"reason": "max_output_tokens"}
    Response.model_validate(final)


def test_failed_reason_carries_an_error() -> None:
    req = parse_responses({"model": "m", "input": "hi"})
    b = ResponseBuilder(base_json("resp_2", "m", req), summary=False)
    b.start()
    final, last = b.finish(choice("error", message="the KV cache is full"), [Piece("content", "x")])
    assert last[-1]["type"] == "response.failed" and final["error"]["message"] == "the KV cache is full"
    Response.model_validate(final)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "x", "background": True}, "background"),
        ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"input": "x", "tools": [{"type": "function", "name": "bad name"}]}, "tools[0].name"),
        ({"input": "x", "tool_choice": "required"}, "tool_choice"),
        ({"input": "x", "tools": [TOOL], "tool_choice": {"type": "file_search"}}, "tool_choice.type"),
        ({"input": "x", "text": {"format": {"type": "json_schema", "name": "n"}}}, "text.format.schema"),
        ({"input": "x", "reasoning": {"effort": "extreme"}}, "reasoning.effort"),
        ({"input": "x", "frobnicate": 1}, "frobnicate"),
        ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
        ({"input": [], "model": "m"}, "input"),
        ({"input": 3}, "input"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]}, "input[0].content[0].type"),
        ({"input": [{"type": "item_reference"}]}, "input[0].id"),
        ({"input": "x", "include": ["message.output_text.logprobs", "web_search_call.results"]}, "include[1]"),
        ({"input": "x", "include": "reasoning.encrypted_content"}, "include"),
        ({"input": "x", "truncation": "middle"}, "truncation"),
        ({"input": "x", "top_logprobs": 21}, "top_logprobs"),
        ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id"),
        ({"input": "x", "metadata": {str(i): "v" for i in range(17)}}, "metadata"),
    ],
)  # fmt: skip
def test_bad_bodies_name_the_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        parse_responses(body)
    assert e.value.param == param, e.value.message


def test_conversation_messages_group_calls_into_one_turn() -> None:
    req = parse_responses({"input": [
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "s"}]},
    ]})  # fmt: skip
    msgs = conversation_messages(req.items)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool"]
    assert [c["id"] for c in msgs[2]["tool_calls"]] == ["c1", "c2"] and msgs[3]["content"] == "one"
    assert all(i["id"] for i in req.items) and len({i["id"] for i in req.items}) == 6


def test_page_orders_and_follows_after() -> None:
    items = [
        {"id": f"i{n}", "type": "message", "role": "user", "content": [], "status": "completed"}
        for n in range(5)
    ]
    first = page(items, limit=None, order=None, after=None)
    assert [i["id"] for i in first["data"]] == ["i4", "i3", "i2", "i1", "i0"] and not first["has_more"]
    ids, after = [], None
    while True:
        p = page(items, limit="2", order="asc", after=after)
        ResponseItemList.model_validate(p)
        ids += [i["id"] for i in p["data"]]
        if not p["has_more"]:
            break
        after = p["last_id"]
    assert ids == ["i0", "i1", "i2", "i3", "i4"]
    for bad in ({"limit": "0"}, {"limit": "x"}, {"order": "up"}, {"after": "nope"}):
        args: dict[str, Any] = {"limit": None, "order": None, "after": None, **bad}
        with pytest.raises(InvalidRequest):
            page(items, **args)


def test_two_calls_are_two_items_with_their_final_arguments() -> None:
    calls = [
        ToolCall("call_a", "get_time", '{"zone": "UTC"}'),
        ToolCall("call_b", "get_time", '{"zone": "CET"}'),
    ]
    steps = [
        [Piece("call", index=0, id="call_a", name="get_time"), Piece("args", '{"zone": "UTC"}', index=0)],
        [Piece("call", index=1, id="call_b", name="get_time"), Piece("args", '{"zone": "CET"}', index=1)],
    ]
    final, events = build(steps, calls=calls)
    check_events(events)
    done = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert [(e["output_index"], e["arguments"]) for e in done] == [
        (0, '{"zone": "UTC"}'),
        (1, '{"zone": "CET"}'),
    ]
    assert [(o["call_id"], o["arguments"]) for o in final["output"]] == [(c.id, c.arguments) for c in calls]
    assert len({o["id"] for o in final["output"]}) == 2
    Response.model_validate(final)


def test_logprobs_go_with_the_message_text_they_make() -> None:
    req = parse_responses({"model": "m", "input": "hi", "include": ["message.output_text.logprobs"],
                           "top_logprobs": 1})  # fmt: skip
    assert req.logprobs and req.sampling.logprobs and req.sampling.top_logprobs == 1
    b = ResponseBuilder(base_json("resp_3", "m", req), summary=False, logprobs=req.logprobs)
    events = b.start()
    tok = [TokenEvent(i, t, -0.5 * i, (TopLogprob(9, b"z", -3.0),), t.encode()) for i, t in enumerate(["\n", "Hi", "!"])]
    events += b.push([Piece("reasoning", "hm")], event=TokenEvent(8, "hm", -0.1, (), b"hm"))
    events += b.push([Piece("content", "\n")], event=tok[0])  # whitespace: no message yet
    events += b.push([Piece("content", "Hi")], event=tok[1])
    events += b.push([], event=tok[2])  # held back, released at the end
    final, last = b.finish(choice("stop"), [Piece("content", "!")])
    check_events(events + last)
    Response.model_validate(final)
    part = final["output"][1]["content"][0]
    assert part["text"] == "\nHi!" and [lp["token"] for lp in part["logprobs"]] == ["\n", "Hi", "!"]
    assert part["logprobs"][1]["logprob"] == -0.5 and part["logprobs"][1]["top_logprobs"][0]["token"] == "z"
    deltas = [e for e in events + last if e["type"] == "response.output_text.delta"]
    assert [[lp["token"] for lp in d["logprobs"]] for d in deltas] == [["\n", "Hi"], []]
    plain = parse_responses({"model": "m", "input": "hi", "include": ["reasoning.encrypted_content",
                                                                       "file_search_call.results"]})  # fmt: skip
    assert not plain.logprobs and not plain.sampling.logprobs
    assert parse_responses({"model": "m", "input": "hi", "truncation": "auto"}).truncation == "auto"

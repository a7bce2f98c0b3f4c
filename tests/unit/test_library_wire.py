"""The remote mode's pure parts (request bodies, SSE, error bodies, scored echoes) and the
options every method checks before anything runs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Literal

import httpx
import pytest
from pydantic import BaseModel

import llamay
from llamay.errors import (
    Conflict,
    ContextOverflow,
    EngineError,
    GrammarError,
    InvalidRequest,
    Overloaded,
    Unauthorized,
)
from llamay.library.backend import ContextHandle
from llamay.library.errors import ServerUnreachable
from llamay.library.options import Ask, messages_of, options
from llamay.library.remote_wire import chat_body, completion_body, error_from, score_results, sse_events


class Reading(BaseModel):
    temp: float
    unit: Literal["c", "f"]


@llamay.tool
def weather(city: str) -> str:
    """Weather."""
    return city


def test_chat_body_carries_only_what_was_set() -> None:
    opts = options(temperature=0, max_tokens=5, stop="END")
    body = chat_body("", Ask([{"role": "user", "content": "hi"}], opts))
    assert body == {
        "model": "",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0,
        "stop": ["END"],
        "max_tokens": 5,
    }


def test_chat_body_output_tools_thinking_and_session() -> None:
    opts = options(output=Reading, tools=[weather], thinking=False)
    body = chat_body("m", Ask([], opts, output=opts.output, session=ContextHandle("ctx-1")))
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
    assert list(fmt["json_schema"]["schema"]["properties"]) == ["temp", "unit"]
    assert body["reasoning_effort"] == "none" and body["llamay_session"] == "ctx-1"
    assert "tools" not in body  # tools are offered per round, in Ask.tools
    with_tools = chat_body("m", Ask([], opts, tools=opts.specs, tool_choice="weather"))
    assert with_tools["tools"][0]["function"]["name"] == "weather"
    assert with_tools["tool_choice"] == {"type": "function", "function": {"name": "weather"}}
    assert chat_body("m", Ask([], options(thinking=64)))["reasoning_budget_tokens"] == 64


def test_a_schema_that_cannot_be_enforced_in_full_is_sent_non_strict() -> None:
    opts = options(output=set[int])
    assert (
        chat_body("", Ask([], opts, output=opts.output))["response_format"]["json_schema"]["strict"] is False
    )


def test_completion_body_limits() -> None:
    assert completion_body("", "x", options())["max_tokens"] == 1 << 30  # until the model stops
    assert completion_body("", "x", options(max_tokens=3))["max_tokens"] == 3
    bounded = completion_body("", "x", options(output=Literal["yes", "no"]))
    assert 4 <= bounded["max_tokens"] < 20  # the schema's own bound


def _response(status: int, body: object, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(status, json=body, headers=headers)


def test_error_bodies_become_the_matching_llamay_error() -> None:
    def err(status: int, code: str, **kw: object) -> httpx.Response:
        return _response(status, {"error": {"message": "m", "type": "t", "param": "p", "code": code}}, **kw)  # type: ignore[arg-type]

    assert isinstance(error_from(err(400, "context_length_exceeded")), ContextOverflow)
    assert isinstance(error_from(err(400, "invalid_grammar")), GrammarError)
    bad = error_from(err(400, "invalid_request"))
    assert type(bad) is InvalidRequest and bad.param == "p" and bad.message == "m"
    assert isinstance(error_from(err(401, "invalid_api_key")), Unauthorized)
    assert isinstance(error_from(err(409, "conflict")), Conflict)
    busy = error_from(err(503, "overloaded", headers={"Retry-After": "7"}))
    assert isinstance(busy, Overloaded) and busy.retry_after == 7
    assert isinstance(error_from(_response(500, {"nothing": 1})), EngineError)
    down = error_from(httpx.ConnectError("refused"))
    assert isinstance(down, ServerUnreachable) and isinstance(down, llamay.LlamayError)


async def _lines(*lines: str) -> AsyncIterator[str]:
    for line in lines:
        yield line


def test_sse_events_end_at_done_and_raise_error_events() -> None:
    async def read(*lines: str) -> list[dict[str, object]]:
        return [e async for e in sse_events(_lines(*lines))]

    assert asyncio.run(
        read('data: {"a": 1}', "", ": comment", 'data: {"b": 2}', "data: [DONE]", 'data: {"c": 3}')
    ) == [
        {"a": 1},
        {"b": 2},
    ]
    with pytest.raises(ContextOverflow):
        asyncio.run(read('data: {"error": {"message": "long", "code": "context_length_exceeded"}}'))


def test_score_results_take_the_tokens_past_the_seam() -> None:
    body = {
        "choices": [
            {
                "text": "Is it? yes",
                "logprobs": {
                    "tokens": ["Is", " it", "?", " yes"],
                    "token_logprobs": [None, -1.0, -0.5, -0.25],
                    "top_logprobs": [None, {" it": -1.0}, {"?": -0.5}, {" yes": -0.25, " no": -2.0}],
                    "text_offset": [0, 2, 5, 6],
                },
            },
            {
                "text": "Is it? nope",
                "logprobs": {
                    "tokens": ["Is", " it", "?", " no", "pe"],
                    "token_logprobs": [None, -1.0, -0.5, -2.0, -0.1],
                    "top_logprobs": [
                        None,
                        {" it": -1.0},
                        {"?": -0.5},
                        {" yes": -0.25, " no": -2.0},
                        {"pe": -0.1},
                    ],
                    "text_offset": [0, 2, 5, 6, 9],
                },
            },
        ]
    }
    yes, nope = score_results(body, [" yes", " nope"])
    assert yes.tokens == [" yes"] and yes.logprobs == [-0.25] and yes.total == -0.25 and yes.greedy
    assert nope.tokens == [" no", "pe"] and nope.total == pytest.approx(-2.1) and not nope.greedy


def test_messages_of() -> None:
    assert messages_of("hi", None) == [{"role": "user", "content": "hi"}]
    assert messages_of("hi", "be brief")[0] == {"role": "system", "content": "be brief"}
    given = [{"role": "user", "content": "a"}]
    out = messages_of(given, None)
    assert out == given and out[0] is not given[0]  # copied, never changed in place
    with pytest.raises(InvalidRequest):
        messages_of([{"role": "system", "content": "x"}], "y")
    with pytest.raises(InvalidRequest):
        messages_of([], None)
    with pytest.raises(InvalidRequest):
        messages_of([{"content": "no role"}], None)


@pytest.mark.parametrize(
    ("kw", "param"),
    [
        ({"temperature": -1}, "temperature"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tool_choice": "nope", "tools": [weather]}, "tool_choice"),
        ({"tools": [{"type": "function", "function": {"name": "x"}}], "run_tools": True}, "tools"),
        ({"tools": [weather, weather]}, "tools"),
        ({"colour": "red"}, "colour"),
        ({"thinking": -5}, "thinking"),
        ({"max_tokens": "5"}, "max_tokens"),
        ({"temperature": True}, "temperature"),
        ({"run_tools": 1}, "run_tools"),
    ],
)
def test_bad_options_are_refused_naming_the_option(kw: dict[str, object], param: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        options(**kw)
    assert err.value.param == param

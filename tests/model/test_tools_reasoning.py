"""Tool calls and reasoning through a real server on tiny generated models, with the
official openai client. Random weights say nothing sensible: the tests check shapes,
schemas and invariants, which the constraint guarantees whatever the weights."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import openai
import pytest

from tests.serverproc import ServerProc, start_server

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 20}, "unit": {"enum": ["c", "f"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 8}},
                       "required": ["zone"], "additionalProperties": False},
    },
}  # fmt: skip
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def server(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    with start_server(tiny_model_path, "-ctx", "4096", home=tmp_path_factory.mktemp("home")) as s:
        yield s


@pytest.fixture(scope="module")
def think_server(
    tiny_think_model_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProc]:
    with start_server(tiny_think_model_path, "-ctx", "4096", home=tmp_path_factory.mktemp("home")) as s:
        yield s


def client_for(s: ServerProc) -> openai.OpenAI:
    return openai.OpenAI(base_url=s.url, api_key="x", max_retries=0, timeout=120)


def check_calls(calls: list, allowed: dict[str, dict]) -> None:
    assert calls
    for c in calls:
        assert c.id.startswith("call_") and c.type == "function"
        assert c.function.name in allowed
        jsonschema.validate(json.loads(c.function.arguments), allowed[c.function.name])


SCHEMAS = {"get_weather": WEATHER["function"]["parameters"], "get_time": TIME["function"]["parameters"]}


@pytest.mark.parametrize("seed", range(4))
def test_required_always_calls_a_valid_tool(server: ServerProc, seed: int) -> None:
    # No finish tool unless asked: "required" is a call of the caller's tools, as on OpenAI.
    r = client_for(server).chat.completions.create(
        model="", messages=ASK, tools=[WEATHER, TIME], tool_choice="required", temperature=1.0, seed=seed,
        max_tokens=1000, parallel_tool_calls=False,
    )  # fmt: skip
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert len(choice.message.tool_calls) == 1
    check_calls(choice.message.tool_calls, SCHEMAS)


def test_parallel_calls_each_fit_their_schema(server: ServerProc) -> None:
    r = client_for(server).chat.completions.create(
        model="", messages=ASK, tools=[WEATHER, TIME], tool_choice="required", temperature=1.0, seed=9,
        max_tokens=400, extra_body={"finish_tool": False},
    )  # fmt: skip
    choice = r.choices[0]
    calls = choice.message.tool_calls
    if choice.finish_reason == "length":  # the last call may be cut off; the rest are whole
        calls = calls[:-1]
    check_calls(calls, SCHEMAS)


def test_named_function_is_the_one_called(server: ServerProc) -> None:
    r = client_for(server).chat.completions.create(
        model="", messages=ASK, tools=[WEATHER, TIME], temperature=0, max_tokens=1000,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
    )  # fmt: skip
    calls = r.choices[0].message.tool_calls
    check_calls(calls, {"get_time": SCHEMAS["get_time"]})


def test_required_with_finish_tool_never_ends_in_plain_text(server: ServerProc) -> None:
    for seed in range(4):
        r = client_for(server).chat.completions.create(
            model="", messages=ASK, tools=[WEATHER], tool_choice="required", temperature=1.0, seed=seed,
            max_tokens=1000, parallel_tool_calls=False, extra_body={"finish_tool": True},
        )  # fmt: skip
        choice = r.choices[0]
        if choice.message.tool_calls:
            assert choice.finish_reason == "tool_calls"
            check_calls(choice.message.tool_calls, {"get_weather": SCHEMAS["get_weather"]})
            assert all(c.function.name != "finish" for c in choice.message.tool_calls)
        else:  # the model called `finish`: its summary is the answer, with no visible call
            # (random weights may write a summary longer than max_tokens: then it is cut off)
            assert choice.finish_reason in ("stop", "length") and isinstance(choice.message.content, str)


def prompt_tokens(s: ServerProc, **extra: object) -> int:
    r = client_for(s).chat.completions.create(
        model="", messages=ASK, tools=[WEATHER], tool_choice="required", temperature=0, max_tokens=64,
        extra_body=extra,
    )  # fmt: skip
    assert r.usage is not None
    return r.usage.prompt_tokens


def test_finish_tool_is_offered_when_asked_or_by_the_server(
    server: ServerProc, tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # The finish tool is rendered into the prompt beside the caller's: it costs prompt tokens.
    bare, asked = prompt_tokens(server), prompt_tokens(server, finish_tool=True)
    assert asked > bare == prompt_tokens(server, finish_tool=False)
    home = tmp_path_factory.mktemp("home")
    with start_server(tiny_model_path, "-ctx", "4096", home=home, env={"LLAMAY_FINISH_TOOL": "auto"}) as auto:
        assert prompt_tokens(auto) == asked
        assert prompt_tokens(auto, finish_tool=False) == bare


def test_streamed_tool_call_deltas_match_the_whole_answer(server: ServerProc) -> None:
    kw = dict(model="", messages=ASK, tools=[WEATHER, TIME], tool_choice="required", temperature=0, max_tokens=1000,
              parallel_tool_calls=False, extra_body={"finish_tool": False})  # fmt: skip
    c = client_for(server)
    whole = c.chat.completions.create(**kw).choices[0].message.tool_calls
    calls: dict[int, dict] = {}
    order: list[str] = []
    finish = None
    for chunk in c.chat.completions.create(stream=True, **kw):
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        finish = chunk.choices[0].finish_reason or finish
        for tc in d.tool_calls or []:
            if tc.id:
                assert tc.index not in calls and tc.function.name  # id and name come first
                calls[tc.index] = {"id": tc.id, "name": tc.function.name, "args": ""}
                order.append("start")
            else:
                calls[tc.index]["args"] += tc.function.arguments or ""
                order.append("args")
    assert finish == "tool_calls"
    assert [(v["name"], json.loads(v["args"])) for _, v in sorted(calls.items())] == [
        (t.function.name, json.loads(t.function.arguments)) for t in whole
    ]
    assert order[0] == "start" and "args" in order


def test_follow_up_turn_renders_and_answers(server: ServerProc) -> None:
    c = client_for(server)
    first = c.chat.completions.create(
        model="", messages=ASK, tools=[WEATHER], tool_choice="required", temperature=0, max_tokens=1000,
        parallel_tool_calls=False, extra_body={"finish_tool": False},
    ).choices[0].message  # fmt: skip
    call = first.tool_calls[0]
    history = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": '{"temp": 21}'},
    ]
    r = c.chat.completions.create(model="", messages=history, tools=[WEATHER], temperature=0, max_tokens=60)
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert r.usage.prompt_tokens > 40


def test_tool_choice_none_answers_in_content_even_json(server: ServerProc) -> None:
    # With calls ruled out, a JSON answer that looks like a call is the answer, not a call.
    for seed in range(3):
        r = client_for(server).chat.completions.create(
            model="", messages=ASK, tools=[WEATHER], tool_choice="none", seed=seed,
            response_format={"type": "json_object"}, max_tokens=40,
        )  # fmt: skip
        msg = r.choices[0].message
        assert not msg.tool_calls
        assert msg.content and msg.content.lstrip().startswith("{")


def test_tool_errors_name_the_field(server: ServerProc) -> None:
    c = client_for(server)
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(
            model="",
            messages=ASK,
            tools=[WEATHER],
            tool_choice={"type": "function", "function": {"name": "nope"}},
        )
    assert "tool_choice" in str(e.value)
    bad = {
        "type": "function",
        "function": {
            "name": "x",
            "parameters": {"type": "object", "properties": {"a": {"type": "array", "uniqueItems": True}}},
        },
    }
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model="", messages=ASK, tools=[bad], extra_body={"finish_tool": False})
    assert "uniqueItems" in str(e.value)


def test_reasoning_is_split_from_content(think_server: ServerProc) -> None:
    c = client_for(think_server)
    r = c.chat.completions.create(model="", messages=ASK, temperature=0, max_tokens=60)
    m = r.choices[0].message.model_dump()
    assert m["reasoning_content"] and "</think>" not in m["content"] and "<think>" not in m["content"]
    parts = {"reasoning_content": "", "content": ""}
    for chunk in c.chat.completions.create(model="", messages=ASK, temperature=0, max_tokens=60, stream=True):
        if chunk.choices:
            d = chunk.choices[0].delta.model_dump()
            for k in parts:
                parts[k] += d.get(k) or ""
    assert parts == {"reasoning_content": m["reasoning_content"], "content": m["content"]}


def test_reasoning_off_and_budget(think_server: ServerProc) -> None:
    c = client_for(think_server)
    full = c.chat.completions.create(model="", messages=ASK, temperature=0, max_tokens=60)
    off = c.chat.completions.create(
        model="", messages=ASK, temperature=0, max_tokens=60, reasoning_effort="none"
    )
    assert not off.choices[0].message.model_dump().get("reasoning_content")
    short = c.chat.completions.create(
        model="", messages=ASK, temperature=0, max_tokens=60, extra_body={"reasoning_budget_tokens": 3}
    )
    thought = short.choices[0].message.model_dump()["reasoning_content"] or ""
    assert len(thought) < len(full.choices[0].message.model_dump()["reasoning_content"])


def test_schema_applies_after_thinking(think_server: ServerProc) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10}}, "required": ["city"],
              "additionalProperties": False}  # fmt: skip
    r = client_for(think_server).chat.completions.create(
        model="", messages=ASK, temperature=0, max_tokens=200,
        response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": schema}},
    )  # fmt: skip
    m = r.choices[0].message.model_dump()
    assert m["reasoning_content"]  # thinking ran free
    jsonschema.validate(json.loads(m["content"]), schema)

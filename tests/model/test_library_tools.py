"""The tool loop of `llamay.LLM` on the real engine with a tiny generated model: the
call is enforced by its schema, the function runs with validated arguments, its result
goes back as a `tool` message, and the loop ends in a text answer."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Literal

import jsonschema
import pytest
from pydantic import Field

import llamay
from llamay.errors import InvalidRequest

calls: list[tuple[str, str]] = []


@llamay.tool
def get_weather(
    city: Annotated[str, Field(max_length=16)], unit: Literal["c", "f"] = "c"
) -> dict[str, object]:
    """Current weather for a city.

    Args:
        city: The city name.
        unit: Celsius or Fahrenheit.
    """
    calls.append((city, unit))
    return {"city": city, "temp": 31, "unit": unit}


@llamay.tool
async def local_time(zone: Literal["UTC", "IST"]) -> str:
    """The time in a zone."""
    await asyncio.sleep(0)
    return "12:00 " + zone


@pytest.fixture(scope="module")
def llm(tiny_model_path: Path) -> Iterator[llamay.LLM]:
    with llamay.LLM(str(tiny_model_path), ctx=4096) as m:
        yield m


def test_the_loop_runs_the_call_and_answers_in_text(llm: llamay.LLM) -> None:
    calls.clear()
    r = llm.chat(
        "Weather in Pune?", tools=[get_weather, local_time], tool_choice="get_weather", run_tools=True,
        max_tool_rounds=1, max_tokens=300, seed=1, temperature=1.0,
    )  # fmt: skip
    assert len(r.tool_calls) == 1 and len(calls) == 1
    call = r.tool_calls[0]
    assert call.name == "get_weather" and call.ran
    jsonschema.validate(call.arguments, get_weather.parameters)  # enforced while sampling
    assert calls[0] == (call.arguments["city"], call.arguments.get("unit", "c"))
    assert call.result == {"city": calls[0][0], "temp": 31, "unit": calls[0][1]}
    roles = [m["role"] for m in r.messages]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert r.messages[1]["tool_calls"][0]["id"] == call.id == r.messages[2]["tool_call_id"]
    assert r.messages[-1]["content"] == r.text and r.text  # then it answered in text
    assert r.finish_reason in ("stop", "length")


def test_without_run_tools_the_calls_come_back(llm: llamay.LLM) -> None:
    calls.clear()
    r = llm.chat(
        "Time in Delhi?", tools=[get_weather, local_time], tool_choice="local_time", seed=1, temperature=1.0
    )
    assert r.finish_reason == "tool_calls" and calls == []
    (call,) = r.tool_calls
    assert call.name == "local_time" and call.arguments["zone"] in ("UTC", "IST") and not call.ran
    assert r.text == ""


def test_an_async_tool_runs_in_the_loop_and_streams(llm: llamay.LLM) -> None:
    stream = llm.stream(
        "Time in Delhi?", tools=[local_time], tool_choice="local_time", run_tools=True, max_tool_rounds=1,
        max_tokens=200, seed=1, temperature=1.0,
    )  # fmt: skip
    chunks = list(stream)
    kinds = [c.kind for c in chunks]
    assert kinds[:2] == ["tool_call", "tool_result"] and set(kinds[2:]) == {"content"}
    result = chunks[1].call
    assert result is not None and result.ran and result.result in ("12:00 UTC", "12:00 IST")
    assert stream.result is not None and "".join(c.text for c in chunks) == stream.result.text
    whole = llm.chat(
        "Time in Delhi?", tools=[local_time], tool_choice="local_time", run_tools=True, max_tool_rounds=1,
        max_tokens=200, seed=1, temperature=1.0,
    )  # fmt: skip
    assert whole.text == stream.result.text  # seeded: the same loop, streamed or not


def test_required_calls_some_tool_then_the_loop_ends(llm: llamay.LLM) -> None:
    r = llm.chat(
        "Weather or time?", tools=[get_weather, local_time], tool_choice="required", run_tools=True,
        max_tool_rounds=2, max_tokens=200, seed=3, temperature=1.0,
    )  # fmt: skip
    # The first round must call (or finish); at most two rounds of calls; then text.
    assert len({c.id for c in r.tool_calls}) == len(r.tool_calls) <= 4
    assert r.messages[-1]["role"] == "assistant" and "tool_calls" not in r.messages[-1]


def test_tools_need_functions_to_run(llm: llamay.LLM) -> None:
    spec = {"type": "function", "function": {"name": "x", "parameters": {"type": "object"}}}
    with pytest.raises(InvalidRequest):
        llm.chat("hi", tools=[spec], run_tools=True)

"""Small models finish under a constraint: a list extraction and a forced tool call with
the real default model, through a real server and the official openai client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import openai
import pytest

from llamay.store import llamay_home
from tests.serverproc import ServerProc, start_server
from tests.slow.test_structured_real import WEATHER

pytestmark = pytest.mark.slow

NOTE = (
    "Extract the record.\n\nDischarge summary. Patient: Anita Sharma, age 62. Admitted 2026-03-04 with "
    "chest pain; troponin normal throughout. Discharged 2026-03-06 on aspirin 75mg daily and "
    "atorvastatin 20mg nightly. Cardiology follow-up in six weeks."
)
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "patient": {"type": "string"}, "age": {"type": "integer"}, "admitted": {"type": "string"},
        "discharged": {"type": "string"}, "medications": {"type": "array", "items": {"type": "string"}},
        "followup_weeks": {"type": "integer"},
    },
    "required": ["patient", "age", "admitted", "discharged", "medications", "followup_weeks"],
    "additionalProperties": False,
}  # fmt: skip


@pytest.fixture(scope="module")
def client() -> Iterator[openai.OpenAI]:
    server: ServerProc
    with start_server("", home=llamay_home(), timeout=600) as server:
        yield openai.OpenAI(base_url=server.url, api_key="x", max_retries=0, timeout=300)


@pytest.mark.parametrize("layout", [None, "compact"])
def test_a_list_extraction_ends_instead_of_inventing_items(client: openai.OpenAI, layout: str | None) -> None:
    # Indented (the default), the model used to list medication after medication until
    # max_tokens.
    r = client.chat.completions.create(
        model="", messages=[{"role": "user", "content": NOTE}], temperature=0, max_tokens=200,
        response_format={"type": "json_schema", "json_schema": {"name": "discharge", "schema": SCHEMA}},
        extra_body={"json_layout": layout} if layout else None,
    )  # fmt: skip
    assert r.choices[0].finish_reason == "stop"
    assert r.usage is not None and r.usage.completion_tokens < 200
    got = json.loads(r.choices[0].message.content or "")
    jsonschema.validate(got, SCHEMA)
    # The guarantee is that the list ends (above); how many items this 135M model writes
    # before ending, and whether they are right, varies with the CPU's float rounding.
    assert got["patient"].startswith("Anita Sharma") and got["admitted"] == "2026-03-04"


def test_a_forced_tool_call_is_one_call_when_the_template_shows_one(client: openai.OpenAI) -> None:
    # SmolLM2's template renders no tool calls at all: one call unless the request asks
    # for more. No max_tokens: it used to run until the context filled.
    r = client.chat.completions.create(
        model="", messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[WEATHER], tool_choice="required", temperature=0,
    )  # fmt: skip
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls or []
    assert len(calls) == 1
    assert calls[0].function.name == "get_weather"
    assert "paris" in json.loads(calls[0].function.arguments)["city"].lower()


def test_parallel_calls_stop_once_the_model_would_repeat_a_call(client: openai.OpenAI) -> None:
    # Asked for parallel calls, the model wanted a second Paris call; pushed off it, it
    # used to invent city after city until max_tokens.
    r = client.chat.completions.create(
        model="", messages=[{"role": "user", "content": "What's the weather like in Paris today?"}],
        tools=[WEATHER], tool_choice="required", temperature=0, max_tokens=300, parallel_tool_calls=True,
        extra_body={"finish_tool": False},
    )  # fmt: skip
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls or []
    assert 1 <= len(calls) <= 2 and "paris" in json.loads(calls[0].function.arguments)["city"].lower()

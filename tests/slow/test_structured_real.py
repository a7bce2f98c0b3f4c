"""Structured output with the real default model and the official openai client."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

import jsonschema
import openai
import pytest

from llamay.grammar.layout import Indented
from llamay.store import llamay_home
from tests.serverproc import ServerProc, start_server
from tests.slow.extraction_cases import CASES, messages

pytestmark = pytest.mark.slow

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProc]:
    with start_server("", "-concurrency", "8", home=llamay_home(), timeout=600) as s:
        yield s


@pytest.fixture()
def client(server: ServerProc) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key="x", max_retries=0, timeout=300)


# In the indented layout the 135M default model, greedy, copies the discharge letter's
# "amoxicillin, paracetamol" as ["amoxicillin", "paracetamol, paracetidiol"]: its own
# choice inside the string, not the server's (the same prompt in its own spacing is right).
MISCOPIED = pytest.mark.xfail(strict=True, reason="the default model miscopies the second medication here")
EXTRACTIONS = [
    pytest.param(*case, layout, id=f"{case[0]}-{layout}", marks=[MISCOPIED] if case[0] == "discharge" and layout == "indented" else [])
    for case in CASES
    for layout in ("indented", "free")
]  # fmt: skip


@pytest.mark.parametrize("name, text, schema, expect, layout", EXTRACTIONS)
def test_extraction_finishes_with_the_right_values(
    client: openai.OpenAI, name: str, text: str, schema: dict, expect: dict, layout: str
) -> None:
    r = client.chat.completions.create(
        model="", messages=messages(text), temperature=0, max_tokens=400,
        response_format={"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}},
        extra_body={"json_layout": layout},
    )  # fmt: skip
    assert r.choices[0].finish_reason == "stop"
    got = json.loads(r.choices[0].message.content)
    jsonschema.validate(got, schema)
    assert got == expect
    if layout == "indented":  # json.dumps(indent=2)'s whitespace, the number as written
        assert Indented().feed(r.choices[0].message.content.encode())


def test_tool_round_trip_required_and_auto(client: openai.OpenAI) -> None:
    ask = [{"role": "user", "content": "What is the weather in Paris in celsius?"}]
    r = client.chat.completions.create(
        model="", messages=ask, tools=[WEATHER], tool_choice="required", temperature=0, max_tokens=200,
        parallel_tool_calls=False, extra_body={"finish_tool": False},
    )  # fmt: skip
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, WEATHER["function"]["parameters"])
    assert call.function.name == "get_weather" and "paris" in args["city"].lower()
    history = ask + [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 18, "sky": "sunny"})},
    ]
    follow = client.chat.completions.create(model="", messages=history, tools=[WEATHER], tool_choice="auto",
                                            temperature=0, max_tokens=120)  # fmt: skip
    fc = follow.choices[0]
    assert fc.finish_reason in ("stop", "tool_calls", "length")
    if fc.message.tool_calls:
        for c in fc.message.tool_calls:
            jsonschema.validate(json.loads(c.function.arguments), WEATHER["function"]["parameters"])
    else:
        assert fc.message.content


def test_streaming_tool_call_deltas(client: openai.OpenAI) -> None:
    ask = [{"role": "user", "content": "Weather in Berlin please, in fahrenheit."}]
    args = ""
    name = None
    finish = None
    for chunk in client.chat.completions.create(
        model="", messages=ask, tools=[WEATHER], tool_choice="required", temperature=0, max_tokens=200,
        stream=True, parallel_tool_calls=False, extra_body={"finish_tool": False},
    ):  # fmt: skip
        if not chunk.choices:
            continue
        for tc in chunk.choices[0].delta.tool_calls or []:
            if tc.id:
                name = tc.function.name
                assert tc.id.startswith("call_")
            args += tc.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert name == "get_weather" and finish == "tool_calls"
    jsonschema.validate(json.loads(args), WEATHER["function"]["parameters"])


def random_schema(rng: random.Random, depth: int = 0) -> dict:
    kinds = ["string", "integer", "number", "boolean", "enum"] + (["object", "array"] if depth < 2 else [])
    kind = rng.choice(kinds)
    if kind == "string":
        return {"type": "string", "maxLength": rng.randint(3, 30)}
    if kind == "integer":
        lo = rng.randint(-50, 50)
        return {"type": "integer", "minimum": lo, "maximum": lo + rng.randint(0, 1000)}
    if kind == "number":
        return {"type": "number", "minimum": 0, "maximum": 100}
    if kind == "boolean":
        return {"type": "boolean"}
    if kind == "enum":
        return {"enum": rng.sample(["red", "green", "blue", "north", "south", 1, 2, None], k=3)}
    if kind == "array":
        return {"type": "array", "items": random_schema(rng, depth + 1), "minItems": 1, "maxItems": 3}
    names = rng.sample(["name", "age", "city", "color", "count", "tags", "ok", "score"], k=rng.randint(1, 4))
    return {
        "type": "object",
        "properties": {n: random_schema(rng, depth + 1) for n in names},
        "required": names,
        "additionalProperties": False,
    }


def test_fifty_varied_schemas_all_validate(client: openai.OpenAI) -> None:
    import concurrent.futures as cf

    rng = random.Random(2026)
    schemas = [random_schema(rng) for _ in range(50)]

    def one(i: int) -> tuple[dict, str, str]:
        r = client.chat.completions.create(
            model="", messages=[{"role": "user", "content": f"Fill in example data number {i}."}], temperature=0.7,
            seed=i, max_tokens=400,
            response_format={"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": schemas[i]}},
        )  # fmt: skip
        return schemas[i], r.choices[0].message.content or "", r.choices[0].finish_reason

    with cf.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(50)))
    finished = [(s, text) for s, text, reason in results if reason == "stop"]
    assert len(finished) >= 45  # a handful may hit max_tokens inside a long free-text value
    for schema, text in finished:
        jsonschema.validate(json.loads(text), schema)

"""Answers that finish, on a real server (tiny generated model, whose random weights ramble
and rarely end by themselves): the default output budget on every API, a limit beyond the
context cut and said, constrained answers closed early with a valid ending that the
OpenAI SDK's `parse` accepts, a max_tokens too small for any answer refused before it runs,
and the one canonical layout of indented JSON."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import openai
import pydantic
import pytest

from tests.serverproc import ServerProc, start_server

BUDGET = 24  # the server's default output budget in these tests
CTX = 1024
MSG = [{"role": "user", "content": "Describe a server."}]
SERVER = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "port": {"type": "integer"},
        "owner": {"type": "object", "properties": {"nick": {"type": "string"}, "mail": {"type": "string"}}, "required": ["nick", "mail"]},
    },
    "required": ["name", "port", "owner"],
    "additionalProperties": False,
}  # fmt: skip


class Owner(pydantic.BaseModel):
    nick: str
    mail: str


class Server(pydantic.BaseModel):
    name: str
    port: int
    owner: Owner


@pytest.fixture(scope="module")
def server(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    home = tmp_path_factory.mktemp("home")
    with start_server(tiny_model_path, "-ctx", str(CTX), "-max-tokens", str(BUDGET), home=home) as s:
        yield s


@pytest.fixture()
def client(server: ServerProc) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key="x", max_retries=0, timeout=120)


def schema_format(schema: dict[str, Any], layout: str | None = None) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "server", "schema": schema}}


def shortest(client: openai.OpenAI, schema: dict[str, Any]) -> int:
    """The minimum the server names in its 400 for max_tokens 1."""
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model="", messages=MSG, max_tokens=1, response_format=schema_format(schema)
        )  # type: ignore[arg-type]
    body = err.value.body
    assert isinstance(body, dict) and body.get("param") == "max_tokens"
    message = str(body.get("message"))
    assert "too small for any valid answer" in message
    return int(message.split("set max_tokens to at least ")[1].rstrip(")"))


def test_requests_without_a_length_get_the_default_budget_on_every_api(
    client: openai.OpenAI, server: ServerProc
) -> None:
    r = client.chat.completions.create(model="", messages=MSG, temperature=1.0, seed=1)  # type: ignore[arg-type]
    assert r.usage is not None and r.usage.completion_tokens <= BUDGET
    assert r.choices[0].finish_reason in ("stop", "length")
    c = client.completions.create(
        model="", prompt="Once upon a time", temperature=1.0, seed=2, max_tokens=None
    )
    assert c.usage is not None and c.usage.completion_tokens <= 16  # OpenAI's own completions default
    o = httpx.post(
        server.base + "/api/chat",
        json={"model": "", "messages": MSG, "stream": False, "options": {"seed": 3}},
        timeout=120,
    ).json()
    assert o["eval_count"] <= BUDGET and o["done_reason"] in ("stop", "length")
    g = httpx.post(
        server.base + "/api/generate", json={"model": "", "prompt": "Hi", "stream": False}, timeout=120
    ).json()
    assert g["eval_count"] <= BUDGET
    r2 = httpx.post(
        server.url + "/responses", json={"model": "", "input": "Hi", "temperature": 1.0}, timeout=120
    ).json()
    assert r2["usage"]["output_tokens"] <= BUDGET
    # and the budget is what /api/show reports
    name = client.models.list().data[0].id
    show = httpx.post(server.base + "/api/show", json={"model": name}, timeout=60)
    assert show.status_code == 200, show.text
    assert f"num_predict{' ' * 19} {BUDGET}" in show.json()["parameters"].splitlines()


def test_a_limit_beyond_the_context_is_cut_and_said(client: openai.OpenAI, server: ServerProc) -> None:
    cut = 0
    for seed in range(4):  # the model may end by itself first; then nothing is said
        r = client.chat.completions.create(
            model="", messages=MSG, max_tokens=100_000, temperature=1.0, seed=seed
        )  # type: ignore[arg-type]
        choice = r.choices[0]
        assert r.usage is not None and r.usage.prompt_tokens + r.usage.completion_tokens <= CTX
        if choice.finish_reason == "length":
            message = choice.model_extra["finish_message"]  # type: ignore[index]
            assert "max_tokens 100000 was cut to" in message and "context is full" in message
            cut += 1
    assert cut  # random weights ramble: at least one ran into the context's end
    assert "failed to find a memory slot" not in server.log()


@pytest.mark.parametrize("seed", range(3))
def test_a_constrained_answer_short_of_room_is_closed_early_and_valid(
    client: openai.OpenAI, seed: int
) -> None:
    least = shortest(client, SERVER)
    for budget in (least, least + 3, least + 20):
        r = client.chat.completions.create(
            model="", messages=MSG, max_tokens=budget, temperature=1.0, seed=seed,  # type: ignore[arg-type]
            response_format=schema_format(SERVER),  # type: ignore[arg-type]
        )  # fmt: skip
        choice = r.choices[0]
        assert r.usage is not None and r.usage.completion_tokens <= budget
        value = json.loads(choice.message.content or "")
        jsonschema.validate(value, SERVER)
        assert choice.finish_reason == "stop"
        extra = choice.model_extra or {}
        if budget == least:  # nothing but the shortest answer fits: it was steered to
            assert extra.get("closed_early") is True
        if extra.get("closed_early"):
            assert "closed early" in extra["finish_message"]
    # at the minimum, only the required keys fit, each with its shortest value
    r = client.chat.completions.create(
        model="", messages=MSG, max_tokens=least, temperature=1.0, seed=seed,  # type: ignore[arg-type]
        response_format=schema_format(SERVER),  # type: ignore[arg-type]
    )  # fmt: skip
    assert set(json.loads(r.choices[0].message.content or "")) == {"name", "port", "owner"}


def test_the_sdk_parse_helper_accepts_a_closed_early_answer(client: openai.OpenAI) -> None:
    schema = Server.model_json_schema()
    least = shortest(client, schema)
    r = client.chat.completions.parse(
        model="",
        messages=MSG,
        max_tokens=least + 2,
        temperature=1.0,
        seed=5,
        response_format=Server,  # type: ignore[arg-type]
    )
    parsed = r.choices[0].message.parsed
    assert isinstance(parsed, Server)
    assert r.choices[0].finish_reason == "stop"


def test_too_small_a_limit_is_refused_before_it_runs(client: openai.OpenAI, server: ServerProc) -> None:
    least = shortest(client, SERVER)
    assert least > 10  # three keys, a nested object: more than a handful of tokens
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model="",
            messages=MSG,
            max_tokens=least - 1,
            response_format=schema_format(SERVER),  # type: ignore[arg-type]
        )
    # the same minimum on the Ollama API (num_predict) and for json_object
    o = httpx.post(
        server.base + "/api/chat",
        json={
            "model": "",
            "messages": MSG,
            "stream": False,
            "format": SERVER,
            "options": {"num_predict": least - 1},
        },
        timeout=60,
    )
    assert o.status_code == 400 and f"at least {least}" in o.text
    j = httpx.post(
        server.url + "/chat/completions",
        json={"model": "", "messages": MSG, "max_tokens": 1, "response_format": {"type": "json_object"}},
        timeout=60,
    )
    assert j.status_code == 400 and "max_tokens" in j.text


def test_a_forced_tool_call_short_of_room_still_has_valid_arguments(client: openai.OpenAI) -> None:
    tool = {"type": "function", "function": {"name": "save", "parameters": SERVER}}
    choice = {"type": "function", "function": {"name": "save"}}
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="", messages=MSG, max_tokens=1, tools=[tool], tool_choice=choice)  # type: ignore[arg-type,list-item]
    message = str(err.value.body.get("message"))  # type: ignore[union-attr]
    least = int(message.split("set max_tokens to at least ")[1].rstrip(")"))
    for budget in (least, least + 10):
        r = client.chat.completions.create(
            model="", messages=MSG, max_tokens=budget, temperature=1.0, seed=6, tools=[tool],  # type: ignore[arg-type,list-item]
            tool_choice=choice,  # type: ignore[arg-type]
        )  # fmt: skip
        calls = r.choices[0].message.tool_calls
        assert calls, r.choices[0]
        jsonschema.validate(json.loads(calls[0].function.arguments), SERVER)  # type: ignore[union-attr]
        assert r.usage is not None and r.usage.completion_tokens <= budget


@pytest.mark.parametrize("seed", range(4))
def test_indented_answers_keep_the_canonical_layout(client: openai.OpenAI, seed: int) -> None:
    r = client.chat.completions.create(
        model="", messages=MSG, max_tokens=200, temperature=1.0, seed=seed,  # type: ignore[arg-type]
        response_format=schema_format(SERVER),  # type: ignore[arg-type]
    )  # fmt: skip
    text = r.choices[0].message.content or ""
    value = json.loads(text)
    assert text == json.dumps(value, indent=2, ensure_ascii=False)

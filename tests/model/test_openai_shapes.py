"""OpenAI response shapes a client generated from OpenAI's API description relies on, on a
real server: required keys (`refusal`), the last streamed chunk of a choice (why it ended,
its usage), and legacy `top_logprobs` that always list the sampled token."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from langchain_core.messages import AIMessageChunk
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from tests.serverproc import ServerProc, start_server

ASK = [{"role": "user", "content": "Describe a city in JSON."}]
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "people": {"type": "integer"}},
    "required": ["name", "people"],
    "additionalProperties": False,
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA}}


@pytest.fixture(scope="module")
def server(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    with start_server(tiny_model_path, "-ctx", "2048", home=tmp_path_factory.mktemp("home")) as s:
        yield s


@pytest.fixture()
def client(server: ServerProc) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key="x", max_retries=0, timeout=120)


def sse(server: ServerProc, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON events of one stream, [DONE] left out."""
    events = []
    with httpx.stream("POST", server.url + path, json={**body, "stream": True}, timeout=120) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line[len("data: ") :]))
    return events


def finish_chunks(events: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Each choice's last chunk (the one with its finish_reason), with the choice's own usage
    (`llamay_usage`); the chunk itself carries none a client would add up."""
    out = {}
    for e in events:
        for c in e["choices"]:
            if c["finish_reason"] is not None:
                assert e.get("usage") is None
                out[c["index"]] = {**c, "usage": c["llamay_usage"]}
    return out


def test_chat_message_and_logprobs_have_refusal(server: ServerProc) -> None:
    body = {"messages": ASK, "max_tokens": 5, "temperature": 0, "logprobs": True, "top_logprobs": 2}
    r = httpx.post(server.url + "/chat/completions", json=body, timeout=120).json()
    choice = r["choices"][0]
    assert choice["message"]["refusal"] is None and isinstance(choice["message"]["content"], str)
    assert choice["logprobs"]["refusal"] is None and len(choice["logprobs"]["content"]) == 5
    events = sse(server, "/chat/completions", body)
    lps = [c["logprobs"] for e in events for c in e["choices"] if c["logprobs"] is not None]
    assert len(lps) == 5 and all(lp["refusal"] is None and len(lp["content"]) == 1 for lp in lps)


def _least(server: ServerProc, path: str, body: dict[str, Any]) -> int:
    """The fewest tokens the server says any valid answer to `body` takes (its 400)."""
    r = httpx.post(server.url + path, json={**body, "max_tokens": 1}, timeout=120)
    assert r.status_code == 400, r.text
    return int(r.json()["error"]["message"].split("at least ")[1].rstrip(")"))


def test_streamed_early_finish_says_what_the_whole_response_says(server: ServerProc) -> None:
    # A schema answer short of room is closed early: the stream's finish says the same.
    body: dict[str, Any] = {"messages": ASK, "response_format": FORMAT, "temperature": 0}
    body["max_tokens"] = _least(server, "/chat/completions", body) + 2
    whole = httpx.post(server.url + "/chat/completions", json=body, timeout=120).json()["choices"][0]
    assert whole["finish_reason"] == "stop" and whole["finish_message"] and whole["closed_early"]
    last = finish_chunks(sse(server, "/chat/completions", body))[0]
    assert last["finish_reason"] == "stop" and last["finish_message"] == whole["finish_message"]
    assert last["closed_early"]
    text: dict[str, Any] = {"prompt": "A city in JSON:", "response_format": FORMAT, "temperature": 0}
    text["max_tokens"] = _least(server, "/completions", text) + 2
    whole = httpx.post(server.url + "/completions", json=text, timeout=120).json()["choices"][0]
    assert whole["finish_reason"] == "stop" and whole["finish_message"]
    last = finish_chunks(sse(server, "/completions", text))[0]
    assert last["finish_message"] == whole["finish_message"]


def test_every_finish_chunk_carries_its_choices_usage(client: openai.OpenAI, server: ServerProc) -> None:
    kw: dict[str, Any] = dict(messages=ASK, n=2, max_tokens=12, temperature=1.0, seed=4, stop=["e"])
    whole = client.chat.completions.create(model="", **kw)
    assert whole.usage is not None
    lasts = finish_chunks(sse(server, "/chat/completions", kw))
    assert sorted(lasts) == [0, 1]
    for last in lasts.values():
        u = last["usage"]
        assert u["prompt_tokens"] == whole.usage.prompt_tokens
        assert (
            1 <= u["completion_tokens"] <= 12
            and u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
        )
    assert sum(last["usage"]["completion_tokens"] for last in lasts.values()) == whole.usage.completion_tokens
    # Asked for, the separate usage chunk still comes last, with the request's totals.
    events = sse(server, "/chat/completions", {**kw, "stream_options": {"include_usage": True}})
    assert events[-1]["choices"] == [] and events[-1]["usage"]["total_tokens"] == whole.usage.total_tokens
    assert all(e["usage"] is None for e in events[:-1])  # OpenAI's spec: null on every chunk but the last
    text = finish_chunks(sse(server, "/completions", {"prompt": "Once", "max_tokens": 7, "temperature": 0}))
    assert text[0]["usage"]["completion_tokens"] == 7
    body = {"prompt": "Once", "n": 2, "max_tokens": 7, "seed": 3, "stream_options": {"include_usage": True}}
    events = sse(server, "/completions", body)
    assert all(e["usage"] is None for e in events[:-1])
    total = sum(last["usage"]["completion_tokens"] for last in finish_chunks(events).values())
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == total > 0


def test_langchain_stream_usage_equals_invoke_usage(server: ServerProc) -> None:
    """LangChain adds up every `usage` a stream carries: the stream's sum must be the
    request's usage, as a whole answer reports it."""
    name = httpx.get(server.url + "/models", timeout=30).json()["data"][0]["id"]
    chat = ChatOpenAI(
        base_url=server.url, api_key=SecretStr("x"), model=name, temperature=0, max_completion_tokens=12,
        stream_usage=True, max_retries=0, timeout=120,
    )  # fmt: skip
    whole = chat.invoke("Describe a city.")
    streamed: AIMessageChunk | None = None
    for chunk in chat.stream("Describe a city."):
        streamed = chunk if streamed is None else streamed + chunk
    assert whole.usage_metadata is not None and streamed is not None and streamed.usage_metadata is not None
    keys = ("input_tokens", "output_tokens", "total_tokens")
    assert whole.usage_metadata["output_tokens"] == 12
    assert [streamed.usage_metadata[k] for k in keys] == [whole.usage_metadata[k] for k in keys]


def test_top_logprobs_list_the_sampled_token(client: openai.OpenAI) -> None:
    outside = 0
    for seed in range(3):
        r = client.completions.create(
            model="", prompt="Once upon a time", max_tokens=16, temperature=2.0, seed=seed, logprobs=1
        )
        lp = r.choices[0].logprobs
        assert lp is not None and lp.tokens and lp.top_logprobs and lp.token_logprobs
        for token, score, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True):
            assert top[token] == score and 1 <= len(top) <= 2
            outside += len(top) == 2
    assert outside > 0  # at temperature 2 some sampled tokens are not the most likely one


def test_fields_that_change_the_meaning_are_refused_by_name(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model="", messages=ASK, max_tokens=2, web_search_options={"search_context_size": "low"}
        )
    body: Any = e.value.body
    assert body["param"] == "web_search_options" and body["code"] == "unsupported_field"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="", messages=ASK, max_tokens=2, modalities=["text", "audio"])
    assert "modalities" in e.value.message

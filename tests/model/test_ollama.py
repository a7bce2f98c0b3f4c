"""Ollama's native API on a real server process with tiny generated models, driven by the
official `ollama` client (raw HTTP where the client hides the wire). Random weights say
nothing sensible: the tests check shapes and invariants (stream == whole answer, limits,
valid JSON and tool arguments), which hold whatever the weights."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import ollama
import pytest

from llamay.runtime import Runtime
from llamay.testing import CHATML
from tests.serverproc import ServerProc, start_server

ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
GREEDY = {"temperature": 0, "seed": 0}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            # The client keeps only type, description, enum and items of each property: enums keep calls short.
            "properties": {
                "city": {"type": "string", "enum": ["Paris", "London", "Rome"]},
                "unit": {"type": "string", "enum": ["c", "f"]},
            },
            "required": ["city", "unit"],
        },
    },
}
AGE = {
    "type": "object",
    "properties": {"age": {"type": "integer", "minimum": 0, "maximum": 150}, "ok": {"type": "boolean"}},
    "required": ["age", "ok"],
    "additionalProperties": False,
}


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


def client(s: ServerProc) -> ollama.Client:
    return ollama.Client(host=s.base, timeout=120)


def check_final(last: Any, *, prompt_min: int = 1) -> None:
    assert last.done is True and last.done_reason in ("stop", "length")
    assert last.prompt_eval_count >= prompt_min and last.eval_count >= 1
    for key in ("total_duration", "load_duration", "prompt_eval_duration", "eval_duration"):
        assert isinstance(getattr(last, key), int) and getattr(last, key) >= 0
    assert last.total_duration >= last.eval_duration > 0


def test_chat_stream_equals_whole_answer(server: ServerProc) -> None:
    c = client(server)
    opts = {**GREEDY, "num_predict": 40}
    whole = c.chat("tiny-llama", messages=ASK, options=opts)
    parts = list(c.chat("tiny-llama", messages=ASK, options=opts, stream=True))
    assert len(whole.message.content) > 20 and whole.message.role == "assistant"
    assert "".join(p.message.content or "" for p in parts) == whole.message.content
    assert all(not p.done for p in parts[:-1]) and len(parts) > 5
    last = parts[-1]
    check_final(last)
    check_final(whole)
    assert last.message.content == "" and whole.done_reason == last.done_reason == "length"
    assert whole.eval_count == last.eval_count == 40 and whole.prompt_eval_count == last.prompt_eval_count
    datetime.fromisoformat(last.created_at)


def test_wire_is_ndjson(server: ServerProc) -> None:
    body = {"model": "tiny-llama", "messages": ASK, "options": {"num_predict": 5}}
    r = httpx.post(server.base + "/api/chat", json=body, timeout=60)
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in r.text.splitlines()]
    assert [x["done"] for x in lines] == [False] * (len(lines) - 1) + [True]
    one = httpx.post(server.base + "/api/chat", json={**body, "stream": False}, timeout=60)
    assert one.headers["content-type"].startswith("application/json") and one.json()["done"] is True


def test_generate_stream_whole_and_context(server: ServerProc) -> None:
    c = client(server)
    opts = {**GREEDY, "num_predict": 12}
    whole = c.generate("tiny-llama", "Tell me a story.", options=opts)
    parts = list(c.generate("tiny-llama", "Tell me a story.", options=opts, stream=True))
    assert "".join(p.response for p in parts) == whole.response and whole.response
    check_final(parts[-1])
    assert parts[-1].context == whole.context and whole.eval_count == 12
    assert len(whole.context) == whole.prompt_eval_count + 12 and all(
        isinstance(t, int) for t in whole.context
    )
    follow = c.generate("tiny-llama", "And then?", context=whole.context, options=opts)
    assert (
        follow.prompt_eval_count > len(whole.context)
        and follow.context[: len(whole.context)] == whole.context
    )
    raw = c.generate("tiny-llama", "<|im_start|>user\nhi<|im_end|>\n", raw=True, options=opts)
    assert raw.context is None and raw.eval_count == 12
    templated = c.generate(
        "tiny-llama",
        "hi",
        system="be brief",
        template="{{ .System }} Q: {{ .Prompt }} A: {{ .Response }}",
        options=opts,
    )
    assert templated.eval_count == 12


def test_num_predict_and_stop(server: ServerProc) -> None:
    c = client(server)
    short = c.chat("tiny-llama", messages=ASK, options={**GREEDY, "num_predict": 3})
    assert short.done_reason == "length" and short.eval_count == 3
    text = c.chat("tiny-llama", messages=ASK, options={**GREEDY, "num_predict": 40}).message.content
    stop = text[len(text) // 2 : len(text) // 2 + 3]
    cut = c.chat("tiny-llama", messages=ASK, options={**GREEDY, "num_predict": 40, "stop": [stop]})
    assert cut.done_reason == "stop" and cut.message.content == text[: text.index(stop)]


def test_same_seed_same_text(server: ServerProc) -> None:
    c = client(server)
    opts = {"temperature": 1.0, "seed": 1234, "num_predict": 25}
    a = c.chat("tiny-llama", messages=ASK, options=opts).message.content
    assert a == c.chat("tiny-llama:latest", messages=ASK, options=opts).message.content
    others = {
        c.chat("tiny-llama", messages=ASK, options={**opts, "seed": s}).message.content for s in (1, 2, 3)
    }
    assert len(others | {a}) > 1


def test_format_schema_and_json(server: ServerProc) -> None:
    c = client(server)
    r = c.chat("tiny-llama", messages=ASK, format=AGE, options={**GREEDY, "num_predict": 200})
    assert r.done_reason == "stop"
    jsonschema.validate(json.loads(r.message.content), AGE)
    parts = list(
        c.chat("tiny-llama", messages=ASK, format=AGE, options={**GREEDY, "num_predict": 200}, stream=True)
    )
    assert "".join(p.message.content for p in parts) == r.message.content
    g = c.generate("tiny-llama", "Age?", format=AGE, options={**GREEDY, "num_predict": 200})
    jsonschema.validate(json.loads(g.response), AGE)
    j = c.chat(
        "tiny-llama", messages=ASK, format="json", options={"temperature": 0.7, "seed": 3, "num_predict": 300}
    )
    if j.done_reason == "stop":
        assert isinstance(json.loads(j.message.content), dict)
    else:  # a free-form object may run long on random weights
        assert j.done_reason == "length" and j.message.content.lstrip().startswith("{")


def test_logprobs(server: ServerProc) -> None:
    c = client(server)
    r = c.chat(
        "tiny-llama", messages=ASK, logprobs=True, top_logprobs=2, options={**GREEDY, "num_predict": 8}
    )
    assert len(r.logprobs) == 8 and "".join(lp.token for lp in r.logprobs) == r.message.content
    for lp in r.logprobs:
        assert (
            lp.logprob <= 0 and len(lp.top_logprobs) == 2 and lp.top_logprobs[0].token == lp.token
        )  # greedy
    parts = list(
        c.generate("tiny-llama", "Hi", logprobs=True, options={**GREEDY, "num_predict": 8}, stream=True)
    )
    assert sum(len(p.logprobs or []) for p in parts) == 8


def check_calls(calls: Any) -> None:
    for call in calls:
        assert call.function.name == "get_weather" and isinstance(call.function.arguments, dict)
        jsonschema.validate(call.function.arguments, WEATHER["function"]["parameters"])


def test_tool_calls_have_object_arguments(server: ServerProc) -> None:
    c = client(server)
    called = []
    for seed in range(16):  # with tools the model may answer in text or call: both must be well formed
        if len(called) == 2:
            break
        r = c.chat(
            "tiny-llama",
            messages=ASK,
            tools=[WEATHER],
            options={"temperature": 1.0, "seed": seed, "num_predict": 200},
        )
        assert isinstance(r.message.content, str) and r.done_reason in ("stop", "length")
        check_calls(r.message.tool_calls or [])
        if r.message.tool_calls:
            called.append((seed, r))
    assert called, "no seed called the tool"
    seed, whole = called[0]
    opts = {"temperature": 1.0, "seed": seed, "num_predict": 200}
    parts = list(c.chat("tiny-llama", messages=ASK, tools=[WEATHER], options=opts, stream=True))
    streamed = [t for p in parts for t in (p.message.tool_calls or [])]
    assert [(t.function.name, t.function.arguments) for t in streamed] == [
        (t.function.name, t.function.arguments) for t in whole.message.tool_calls
    ]
    history = ASK + [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [t.model_dump() for t in whole.message.tool_calls],
        },
        {"role": "tool", "content": '{"temp": 21}', "tool_name": "get_weather"},
    ]
    follow = c.chat("tiny-llama", messages=history, tools=[WEATHER], options={**GREEDY, "num_predict": 30})
    assert follow.prompt_eval_count > whole.prompt_eval_count


def test_thinking_is_apart_and_can_be_off(think_server: ServerProc) -> None:
    c = client(think_server)
    opts = {**GREEDY, "num_predict": 60}
    r = c.chat("tiny-think-llama", messages=ASK, think=True, options=opts)
    assert r.message.thinking and "<think>" not in r.message.content and "</think>" not in r.message.content
    parts = list(c.chat("tiny-think-llama", messages=ASK, think=True, options=opts, stream=True))
    assert "".join(p.message.thinking or "" for p in parts) == r.message.thinking
    assert "".join(p.message.content or "" for p in parts) == r.message.content
    off = c.chat("tiny-think-llama", messages=ASK, think=False, options=opts)
    assert not off.message.thinking and off.message.content
    g = c.generate("tiny-think-llama", "Hello", think=True, options=opts)
    assert g.thinking and "<think>" not in g.response
    assert "thinking" in c.show("tiny-think-llama").capabilities


def test_tags_ps_show_version(server: ServerProc, tiny_model_path: Path) -> None:
    c = client(server)
    tags = {m.model: m for m in c.list().models}
    tag = tags["tiny-llama"]
    assert tag.size == tiny_model_path.stat().st_size and len(tag.digest) == 64
    assert tag.details.format == "gguf" and tag.details.family == "llama" and tag.details.parameter_size
    (running,) = [m for m in c.ps().models if m.model == "tiny-llama"]
    assert (
        running.context_length == 4096 and running.size_vram == 0 and running.expires_at > datetime.now(UTC)
    )
    show = c.show("tiny-llama")
    assert show.template == CHATML and show.details.family == "llama"
    assert show.modelinfo["general.architecture"] == "llama" and show.modelinfo["llama.context_length"] > 0
    assert show.capabilities[:2] == ["completion", "tools"]
    raw_ps = httpx.get(server.base + "/api/ps").json()["models"][0]
    assert "completion" in raw_ps["capabilities"]
    assert httpx.get(server.base + "/api/version").json()["version"].count(".") == 2


def test_errors_in_ollamas_shape(server: ServerProc) -> None:
    c = client(server)
    with pytest.raises(ollama.ResponseError) as e:
        c.chat("tiny-llama", messages=[{"role": "user", "content": "hi", "images": [b"\x89PNG"]}])
    assert e.value.status_code == 400 and "images" in e.value.error
    with pytest.raises(ollama.ResponseError) as e:
        c.generate("tiny-llama", "hi", images=[b"\x89PNG"])
    assert e.value.status_code == 400
    for call in (lambda: c.chat("no-such-model", messages=ASK), lambda: c.generate("no-such-model", "hi"),
                 lambda: c.show("no-such-model")):  # fmt: skip
        with pytest.raises(ollama.ResponseError) as e:
            call()
        assert e.value.status_code == 404 and "no-such-model" in e.value.error
    r = httpx.post(
        server.base + "/api/chat", json={"model": "tiny-llama", "messages": ASK, "options": {"top_p": 7}}
    )
    assert r.status_code == 400 and set(r.json()) == {"error"} and "options.top_p" in r.json()["error"]


def test_load_keep_alive_unload_reset(
    tiny_model_path: Path, tiny_think_model_path: Path, tmp_path: Path
) -> None:
    with start_server(tiny_model_path, "-ctx", "2048", home=tmp_path / "home") as s:
        c = client(s)
        other = str(tiny_think_model_path)
        assert c.generate(other, keep_alive="10m").done_reason == "load"
        (loaded,) = [m for m in c.ps().models if m.model == "tiny-think-llama"]
        left = (loaded.expires_at - datetime.now(UTC)).total_seconds()
        assert 500 < left <= 600
        assert c.chat(other, messages=[], keep_alive=0).done_reason == "unload"
        assert [m.model for m in c.ps().models] == ["tiny-llama"]
        assert c.chat(other, messages=ASK, options={"num_predict": 2}).eval_count == 2  # loads on demand
        r = httpx.post(s.base + "/api/reset", timeout=60)
        assert r.status_code == 200 and sorted(r.json()["unloaded"]) == ["tiny-llama", "tiny-think-llama"]
        assert c.ps().models == []


def test_store_and_embedding_routes_answer_or_say_why(server: ServerProc) -> None:
    r = httpx.post(server.base + "/api/embed", json={"model": "tiny-llama", "input": "hi"})
    if not hasattr(Runtime, "embed"):
        assert r.status_code == 501 and "runtime.embed" in r.json()["error"]
    r = httpx.post(server.base + "/api/copy", json={"source": "no-such-model", "destination": "x"})
    assert r.status_code in (404, 501) and r.json()["error"]
    r = httpx.request("DELETE", server.base + "/api/delete", json={"model": "no-such-model"})
    assert r.status_code in (404, 501) and r.json()["error"]


def test_create_copy_delete_pull_with_the_store(tiny_model_path: Path, tmp_path: Path) -> None:
    with start_server(tiny_model_path, "-ctx", "2048", home=tmp_path / "home") as s:
        c = client(s)
        lines = list(
            c.create(
                "mine",
                from_=str(tiny_model_path),
                system="Be brief.",
                parameters={"temperature": 0.3},
                stream=True,
            )
        )
        assert lines[-1].status == "success"
        assert {"mine:latest", "tiny-llama"} <= {m.model for m in c.list().models}
        assert "temperature" in c.show("mine").parameters and c.show("mine").capabilities
        mine = c.chat("mine", messages=ASK, options={"num_predict": 2})  # loads it
        plain = c.chat("tiny-llama", messages=ASK, options={"num_predict": 2})
        assert mine.eval_count == 2 and mine.prompt_eval_count > plain.prompt_eval_count  # its system prompt
        c.create("short", from_="mine", parameters={"num_predict": 3, "temperature": 0})
        a, b = (c.generate("short", "Hi") for _ in range(2))
        assert a.eval_count == 3 and a.done_reason == "length" and a.response == b.response  # its own options
        assert c.generate("short", "Hi", options={"num_predict": 5}).eval_count == 5  # under the request's
        assert c.copy("mine", "mine2").status == "success"
        assert c.delete("mine2").status == "success"
        assert "mine2:latest" not in {m.model for m in c.list().models}
        with pytest.raises(ollama.ResponseError) as e:
            c.delete("mine2")
        assert e.value.status_code == 404
        with pytest.raises(ollama.ResponseError):
            list(c.pull("no-such-source-anywhere:1b", stream=True))


def test_creating_a_loaded_name_again_applies_its_new_parameters_at_once(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    # A loaded model keeps its parameters between requests; the store's routes make it read
    # them again, so the next request after a create already runs under the new ones.
    with start_server(tiny_model_path, "-ctx", "2048", home=tmp_path / "home") as s:
        c = client(s)
        c.create("brief", from_=str(tiny_model_path), parameters={"num_predict": 3, "temperature": 0})
        assert c.generate("brief", "Hi").eval_count == 3  # loads it, under num_predict 3
        assert c.generate("brief", "Hi").eval_count == 3  # kept
        c.create("brief", from_=str(tiny_model_path), parameters={"num_predict": 6, "temperature": 0})
        again = c.generate("brief", "Hi")
        assert again.eval_count == 6 and again.done_reason == "length"
        assert "brief:latest" in {m.model for m in c.ps().models}  # the same load, not a reload


def test_tool_names_as_ollama_takes_them(server: ServerProc) -> None:
    dotted = {**WEATHER, "function": {**WEATHER["function"], "name": "weather.get"}}
    c = client(server)
    for seed in range(16):  # the model may answer in text; some seed calls
        r = c.chat("tiny-llama", messages=ASK, tools=[dotted], options={"temperature": 1.0, "seed": seed, "num_predict": 200})  # fmt: skip
        if r.message.tool_calls:
            assert {t.function.name for t in r.message.tool_calls} == {"weather.get"}
            jsonschema.validate(r.message.tool_calls[0].function.arguments, WEATHER["function"]["parameters"])
            break
    else:
        pytest.fail("no seed called the tool")
    bad = {**WEATHER, "function": {**WEATHER["function"], "name": "weather\nget"}}
    with pytest.raises(ollama.ResponseError) as e:
        c.chat("tiny-llama", messages=ASK, tools=[bad])
    assert e.value.status_code == 400 and "tools[0].function.name" in str(e.value)

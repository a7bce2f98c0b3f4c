"""Anthropic's Messages API on a real `llamay serve` process, driven by the official
`anthropic` client with strict response validation (every reply must parse as the
client's own types). Random tiny weights say nothing sensible: the tests check shapes,
invariants and what the constraint guarantees."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import anthropic
import httpx
import httpx2
import jsonschema
import pytest

from tests.serverproc import ServerProc, start_server

KEY = "k-anthropic-test"
ASK: Any = [{"role": "user", "content": "Tell me about the weather in the mountains."}]
SCHEMA: Any = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 20}, "unit": {"enum": ["c", "f"]}},
    "required": ["city", "unit"],
    "additionalProperties": False,
}
WEATHER: Any = {"name": "get_weather", "description": "Current weather for a city", "input_schema": SCHEMA}
GREEDY: dict[str, Any] = {"extra_body": {"temperature": 0}}  # this client version has no `temperature`
ONE_CALL: Any = {"type": "any", "disable_parallel_tool_use": True}


@pytest.fixture(scope="module")
def server(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    home = tmp_path_factory.mktemp("home")
    with start_server(tiny_model_path, "-ctx", "4096", home=home, env={"LLAMAY_API_KEY": KEY}) as s:
        yield s


@pytest.fixture(scope="module")
def think_server(
    tiny_think_model_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProc]:
    with start_server(tiny_think_model_path, "-ctx", "4096", home=tmp_path_factory.mktemp("home")) as s:
        yield s


def client_for(s: ServerProc, key: str = KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=s.base, api_key=key, max_retries=0, timeout=120, _strict_response_validation=True
    )


def text_of(message: Any) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


def test_stream_and_whole_give_the_same_message(server: ServerProc) -> None:
    c = client_for(server)
    whole = c.messages.create(model="", max_tokens=40, messages=ASK, **GREEDY)
    assert whole.id.startswith("msg_") and whole.type == "message" and whole.role == "assistant"
    assert whole.stop_reason == "max_tokens" and whole.stop_sequence is None
    assert whole.usage.output_tokens == 40 and len(text_of(whole)) > 20
    parts: list[str] = []
    with c.messages.stream(model="", max_tokens=40, messages=ASK, **GREEDY) as stream:
        parts.extend(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(parts) == text_of(whole) == text_of(final) and len(parts) > 5
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 40
    total = final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0)
    assert total == whole.usage.input_tokens + (whole.usage.cache_read_input_tokens or 0)


def test_raw_event_order_and_framing(server: ServerProc) -> None:
    body = {"model": "", "max_tokens": 8, "messages": ASK, "stream": True, "temperature": 0}
    with httpx.stream("POST", server.base + "/v1/messages", json=body, headers={"x-api-key": KEY}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        frames = r.read().decode().strip().split("\n\n")
    events = []
    for frame in frames:
        name_line, data_line = frame.split("\n")
        assert name_line.startswith("event: ") and data_line.startswith("data: ")
        data = json.loads(data_line[len("data: ") :])
        assert data["type"] == name_line[len("event: ") :]
        events.append(data)
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["message_start", "ping"] and kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds[2] == "content_block_start" and kinds[-3] == "content_block_stop"
    assert events[-2]["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert events[-2]["usage"]["output_tokens"] == 8


def test_stop_sequences(server: ServerProc) -> None:
    c = client_for(server)
    text = text_of(c.messages.create(model="", max_tokens=40, messages=ASK, **GREEDY))
    stop = text[12:15]
    cut = text.find(stop)
    assert cut > 0 and text[:cut].strip()
    r = c.messages.create(model="", max_tokens=40, messages=ASK, stop_sequences=["\x00never", stop], **GREEDY)
    assert r.stop_reason == "stop_sequence" and r.stop_sequence == stop
    assert text_of(r) == text[:cut]
    with c.messages.stream(model="", max_tokens=40, messages=ASK, stop_sequences=[stop], **GREEDY) as s:
        final = s.get_final_message()
    assert (final.stop_reason, final.stop_sequence, text_of(final)) == ("stop_sequence", stop, text[:cut])
    # A stop sequence that never shows up leaves stop_sequence null.
    r = c.messages.create(model="", max_tokens=5, messages=ASK, stop_sequences=["\x00never"], **GREEDY)
    assert r.stop_reason == "max_tokens" and r.stop_sequence is None


def test_tool_round_trip(server: ServerProc) -> None:
    c = client_for(server)
    first = c.messages.create(
        model="", max_tokens=1000, messages=ASK, tools=[WEATHER], tool_choice=ONE_CALL, **GREEDY
    )
    assert first.stop_reason == "tool_use"
    calls = [b for b in first.content if b.type == "tool_use"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and calls[0].id.startswith("toolu_")
    jsonschema.validate(calls[0].input, SCHEMA)
    history: Any = ASK + [
        first.to_param(),
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": calls[0].id, "content": "21C, sunny"}],
        },
    ]
    second = c.messages.create(model="", max_tokens=30, messages=history, tools=[WEATHER], **GREEDY)
    assert second.stop_reason in ("end_turn", "max_tokens", "tool_use")
    grown = second.usage.input_tokens + (second.usage.cache_read_input_tokens or 0)
    assert grown > first.usage.input_tokens + (first.usage.cache_read_input_tokens or 0) + 10
    # The rendered history holds the call and its result.
    counted = c.messages.count_tokens(model="", messages=history, tools=[WEATHER]).input_tokens
    assert counted == grown


def test_named_tool_and_streamed_tool_input(server: ServerProc) -> None:
    c = client_for(server)
    kw: dict[str, Any] = dict(
        model="",
        max_tokens=1000,
        messages=ASK,
        tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"},
    )
    whole = c.messages.create(**kw, **GREEDY)
    [call] = [b for b in whole.content if b.type == "tool_use"]
    fragments: dict[int, str] = {}
    starts = []
    for ev in c.messages.create(stream=True, **kw, **GREEDY):
        if ev.type == "content_block_start" and ev.content_block.type == "tool_use":
            starts.append(ev.content_block)
            assert ev.content_block.input == {}
        elif ev.type == "content_block_delta" and ev.delta.type == "input_json_delta":
            fragments[ev.index] = fragments.get(ev.index, "") + ev.delta.partial_json
        elif ev.type == "message_delta":
            assert ev.delta.stop_reason == "tool_use"
    assert [s.name for s in starts] == ["get_weather"] and len(fragments) == 1
    [args] = fragments.values()
    assert json.loads(args) == call.input
    jsonschema.validate(call.input, SCHEMA)


def test_thinking_blocks(think_server: ServerProc) -> None:
    c = client_for(think_server)
    r = c.messages.create(
        model="", max_tokens=60, messages=ASK, thinking={"type": "enabled", "budget_tokens": 1024}, **GREEDY
    )
    kinds = [b.type for b in r.content]
    assert kinds[0] == "thinking" and "text" in kinds[1:]
    thought = r.content[0]
    assert thought.type == "thinking" and thought.thinking and thought.signature
    assert "<think>" not in text_of(r) and "</think>" not in text_of(r)
    # Streamed: the same blocks, the signature arriving as a signature_delta.
    with c.messages.stream(
        model="", max_tokens=60, messages=ASK, thinking={"type": "enabled", "budget_tokens": 1024}, **GREEDY
    ) as s:
        final = s.get_final_message()
    dump = [b.model_dump(exclude={"parsed_output"}) for b in final.content]
    assert dump == [b.model_dump() for b in r.content]
    # Off (explicitly, or by default as with Claude): no thinking block.
    offs: list[dict[str, Any]] = [{"thinking": {"type": "disabled"}}, {}]
    for extra in offs:
        off = c.messages.create(model="", max_tokens=30, messages=ASK, **extra, **GREEDY)
        assert [b.type for b in off.content] == ["text"]


def test_thinking_budget_is_respected(think_server: ServerProc) -> None:
    c = client_for(think_server)
    full = c.messages.create(model="", max_tokens=60, messages=ASK, thinking={"type": "adaptive"}, **GREEDY)
    deltas = 0
    with c.messages.stream(
        model="", max_tokens=60, messages=ASK, thinking={"type": "enabled", "budget_tokens": 3}, **GREEDY
    ) as s:
        for ev in s:
            if ev.type == "content_block_delta" and ev.delta.type == "thinking_delta":
                deltas += 1
        short = s.get_final_message()
    assert short.content[0].type == "thinking" and full.content[0].type == "thinking"
    assert 0 < deltas <= 3
    assert len(short.content[0].thinking) < len(full.content[0].thinking)
    assert any(b.type == "text" for b in short.content)


def test_count_tokens_matches_usage(server: ServerProc) -> None:
    c = client_for(server)
    kw: dict[str, Any] = dict(model="", messages=ASK, system="You are terse.", tools=[WEATHER])
    counted = c.messages.count_tokens(**kw).input_tokens
    u = c.messages.create(max_tokens=48, **kw, **GREEDY).usage
    assert counted == u.input_tokens + (u.cache_read_input_tokens or 0) + (u.cache_creation_input_tokens or 0)
    assert counted > c.messages.count_tokens(model="", messages=ASK).input_tokens


def test_prefill_is_continued(server: ServerProc) -> None:
    c = client_for(server)
    prefill: Any = [*ASK, {"role": "assistant", "content": "The mountains"}]
    with_prefill = c.messages.count_tokens(model="", messages=prefill).input_tokens
    assert with_prefill > c.messages.count_tokens(model="", messages=ASK).input_tokens
    r = c.messages.create(model="", max_tokens=10, messages=prefill, **GREEDY)
    assert (
        r.stop_reason == "max_tokens"
        and r.usage.input_tokens + (r.usage.cache_read_input_tokens or 0) == with_prefill
    )


def test_cache_usage_on_a_repeated_system_prompt(server: ServerProc) -> None:
    c = client_for(server)
    words = " ".join(secrets.token_hex(3) for _ in range(150))  # unique: nothing cached yet
    system: Any = [
        {"type": "text", "text": f"Reference notes: {words}", "cache_control": {"type": "ephemeral"}}
    ]
    first = c.messages.create(model="", max_tokens=3, system=system, messages=ASK, **GREEDY).usage
    assert (first.cache_read_input_tokens or 0) < 10 and (first.cache_creation_input_tokens or 0) > 150
    question: Any = [{"role": "user", "content": "And what about the sea?"}]
    second = c.messages.create(model="", max_tokens=3, system=system, messages=question, **GREEDY).usage
    assert (second.cache_read_input_tokens or 0) > 150 and second.cache_creation_input_tokens == 0
    counted = c.messages.count_tokens(model="", system=system, messages=question).input_tokens
    assert (
        counted
        == second.input_tokens + (second.cache_read_input_tokens or 0) + second.cache_creation_input_tokens
    )
    # No breakpoint: reads are still reported, creation never.
    plain = c.messages.create(
        model="", max_tokens=3, system=system[0]["text"], messages=question, **GREEDY
    ).usage
    assert (plain.cache_read_input_tokens or 0) > 150 and plain.cache_creation_input_tokens == 0


def test_errors_in_anthropic_shape(server: ServerProc) -> None:
    c = client_for(server)
    with pytest.raises(anthropic.BadRequestError) as bad:
        c.messages.create(model="", max_tokens=0, messages=ASK)
    assert bad.value.status_code == 400 and bad.value.type == "invalid_request_error"
    assert "max_tokens" in str(bad.value.message)
    with pytest.raises(anthropic.BadRequestError):
        image: Any = [{"role": "user", "content": [{"type": "image"}]}]
        c.messages.create(model="", max_tokens=5, messages=image)
    with pytest.raises(anthropic.BadRequestError):  # refused before the stream starts
        c.messages.create(model="", max_tokens=5, messages=[], stream=True)
    with pytest.raises(anthropic.NotFoundError) as missing:
        c.messages.create(model="no-such-model", max_tokens=5, messages=ASK)
    assert missing.value.status_code == 404 and missing.value.type == "not_found_error"
    with pytest.raises(anthropic.NotFoundError):
        c.messages.count_tokens(model="no-such-model", messages=ASK)
    r = httpx.post(server.base + "/v1/messages", content=b"{not json", headers={"x-api-key": KEY})
    assert r.status_code == 400 and r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "invalid_request_error" and r.headers["request-id"].startswith("req_")
    with pytest.raises(anthropic.AuthenticationError):
        client_for(server, key="wrong").messages.create(model="", max_tokens=5, messages=ASK)


def test_claude_model_ids_mean_the_default_model(server: ServerProc) -> None:
    c = client_for(server)
    default = c.messages.create(model="", max_tokens=3, messages=ASK, **GREEDY)
    r = c.messages.create(model="claude-sonnet-4-5", max_tokens=3, messages=ASK, **GREEDY)
    assert r.model == default.model and text_of(r) == text_of(default)
    assert c.messages.count_tokens(model="claude-opus-4-1", messages=ASK).input_tokens > 0


def test_tool_input_short_of_max_tokens_is_closed_early_and_keeps_what_was_generated(
    server: ServerProc,
) -> None:
    # A forced call that max_tokens cannot hold whole is closed early: a whole, valid call
    # that keeps what was generated before the close (and a limit too small for any call
    # is refused before it runs).
    c = client_for(server)
    kw: dict[str, Any] = dict(model="", messages=ASK, tools=[WEATHER], tool_choice=ONE_CALL)
    whole = c.messages.create(max_tokens=1000, **kw, **GREEDY)
    [done] = [b for b in whole.content if b.type == "tool_use"]
    with pytest.raises(anthropic.BadRequestError):
        c.messages.create(max_tokens=1, **kw, **GREEDY)
    shorter = 0
    for k in range(1, 8):  # greedy: the same call, closed at several points
        n = whole.usage.output_tokens * k // 8
        try:
            r = c.messages.create(max_tokens=n, **kw, **GREEDY)
        except anthropic.BadRequestError:
            continue  # below the shortest call
        assert r.stop_reason == "tool_use" and r.usage.output_tokens <= n
        [cut] = [b.input for b in r.content if b.type == "tool_use"]
        jsonschema.validate(cut, WEATHER["input_schema"])
        fragments = "".join(
            ev.delta.partial_json
            for ev in c.messages.create(max_tokens=n, stream=True, **kw, **GREEDY)
            if ev.type == "content_block_delta" and ev.delta.type == "input_json_delta"
        )
        assert cut == json.loads(fragments)  # the stream and the whole agree
        shorter += cut != done.input
    assert shorter, "some limit should close the call before its own end"


def test_models_in_anthropics_shape(server: ServerProc) -> None:
    c = client_for(server)
    models = c.models.list()
    assert [m.id for m in models.data] == ["tiny-llama"] and models.has_more is False
    assert models.first_id == models.last_id == "tiny-llama"
    m = c.models.retrieve("tiny-llama")
    assert m.type == "model" and m.display_name == "tiny-llama" and m.created_at.tzinfo is not None
    with pytest.raises(anthropic.NotFoundError) as e:
        c.models.retrieve("nope")
    assert e.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    # Without the header, the same path answers OpenAI's shape.
    body = httpx.get(server.base + "/v1/models", headers={"authorization": f"Bearer {KEY}"}).json()
    assert body["object"] == "list" and body["data"][0]["object"] == "model"


def test_tool_runner_falls_back_from_a_thread_to_the_whole_conversation(server: ServerProc) -> None:
    """The SDK's tool runner asks for a server-held thread first. The server keeps none and
    says so with Anthropic's own code, on which the runner resends every turn whole."""
    seen: list[tuple[dict[str, Any], str | None, int]] = []

    def record(response: httpx2.Response) -> None:
        response.read()
        body = json.loads(response.request.content)
        seen.append((body, response.request.headers.get("anthropic-beta"), response.status_code))

    ran: list[str] = []

    @anthropic.beta_tool
    def get_weather(unit: Literal["c", "f"]) -> str:
        """Current weather here."""
        ran.append(unit)
        return "21 and sunny"

    http = httpx2.Client(event_hooks={"response": [record]})  # the SDK's own HTTP package
    c = anthropic.Anthropic(base_url=server.base, api_key=KEY, max_retries=0, timeout=120, http_client=http)
    runner = c.beta.messages.tool_runner(
        model="", max_tokens=200, messages=ASK, tools=[get_weather], tool_choice=ONE_CALL, max_iterations=2
    )
    replies = list(runner)
    assert len(replies) == 2 and all(r.stop_reason == "tool_use" for r in replies) and len(ran) == 2
    first, *rest = seen
    assert first[0]["thread"] == {"type": "create"} and "message-threads" in (first[1] or "")
    assert first[2] == 400
    assert [status for _, _, status in rest] == [200, 200]
    assert all("thread" not in body for body, _, _ in rest)
    # the second turn carries the whole conversation: the question, the call and its result
    assert [m["role"] for m in rest[1][0]["messages"]] == ["user", "assistant", "user"]
    assert rest[1][0]["tools"][0]["name"] == "get_weather"


def test_unsupported_fields_are_refused_by_name(server: ServerProc) -> None:
    c = client_for(server)
    with pytest.raises(anthropic.BadRequestError) as e:
        c.beta.messages.create(
            model="", max_tokens=5, messages=ASK,
            mcp_servers=[{"type": "url", "url": "https://example.com/sse", "name": "x"}],
        )  # fmt: skip
    assert "mcp_servers" in e.value.message
    body = httpx.post(server.base + "/v1/messages", headers={"x-api-key": KEY},
                      json={"model": "", "max_tokens": 5, "messages": ASK, "container": "c1"}, timeout=60)  # fmt: skip
    assert body.status_code == 400 and body.json()["error"]["details"] == {"error_code": "unsupported_field"}
    assert "'container'" in body.json()["error"]["message"]

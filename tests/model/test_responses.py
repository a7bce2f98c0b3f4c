"""POST /v1/responses on a real server with tiny generated models, through the official
openai client with strict response validation. Random weights say nothing sensible: the
tests check shapes, event order, constraints and what the server keeps between turns."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import openai
import pytest

from tests.serverproc import ServerProc, start_server

SCHEMA: Any = {
    "type": "object",
    "properties": {"city": {"enum": ["Paris", "Rome", "Oslo"]}, "sunny": {"type": "boolean"}},
    "required": ["city", "sunny"],
    "additionalProperties": False,
}
FORMAT: Any = {"format": {"type": "json_schema", "name": "weather", "schema": SCHEMA, "strict": True}}
WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["c", "f"]}},
        "required": ["city", "unit"],
        "additionalProperties": False,
    },
}
TIME: Any = {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {
    "zone": {"type": "string", "maxLength": 6}}, "required": ["zone"], "additionalProperties": False}}  # fmt: skip
ARGS = {"get_weather": WEATHER["parameters"], "get_time": TIME["parameters"]}


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


def client_for(s: ServerProc, key: str = "x") -> openai.OpenAI:
    return openai.OpenAI(
        base_url=s.url, api_key=key, max_retries=0, timeout=120, _strict_response_validation=True
    )


@pytest.fixture()
def client(server: ServerProc) -> openai.OpenAI:
    return client_for(server)


def contexts(s: ServerProc) -> set[str]:
    return {c["id"] for c in httpx.get(s.url + "/contexts", timeout=30).json()["data"]}


def test_create_and_get(client: openai.OpenAI) -> None:
    r = client.responses.create(model="", input="Tell me a story.", max_output_tokens=9, temperature=0,
                                metadata={"k": "v"}, user="someone", safety_identifier="abc")  # fmt: skip
    assert r.object == "response" and r.id.startswith("resp_") and r.metadata == {"k": "v"}
    assert (
        r.status == "incomplete"
        and r.incomplete_details
        and r.incomplete_details.reason == "max_output_tokens"
    )
    assert r.usage and r.usage.output_tokens == 9 and r.usage.input_tokens > 5
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert r.output_text and r.output[0].type == "message" and r.output[0].status == "incomplete"
    assert client.responses.retrieve(r.id) == r


def test_stream_events_in_order_and_end_with_what_get_returns(client: openai.OpenAI) -> None:
    events = list(
        client.responses.create(model="", input="Weather?", text=FORMAT, temperature=0, stream=True)
    )
    assert [e.sequence_number for e in events] == list(range(len(events)))
    types = [e.type for e in events]
    deltas = types.count("response.output_text.delta")
    assert deltas > 3
    assert types == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added", *["response.output_text.delta"] * deltas, "response.output_text.done",
        "response.content_part.done", "response.output_item.done", "response.completed",
    ]  # fmt: skip
    last = events[-1]
    assert last.type == "response.completed"
    final = last.response
    assert final == client.responses.retrieve(final.id)
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == final.output_text
    jsonschema.validate(json.loads(text), SCHEMA)
    # The SDK's stream helper assembles the same response.
    with client.responses.stream(model="", input="Weather?", text=FORMAT, temperature=0) as stream:
        got = [e.type for e in stream]
        helper = stream.get_final_response()
    assert got[-1] == "response.completed" and helper.output_text == final.output_text
    stored = client.responses.retrieve(helper.id)
    assert stored.output_text == helper.output_text and stored.usage == helper.usage
    assert [o.id for o in stored.output] == [o.id for o in helper.output]  # type: ignore[union-attr]


def test_text_format_json_schema_and_json_object(client: openai.OpenAI) -> None:
    r = client.responses.create(model="", input="Weather in a city?", text=FORMAT, temperature=1.0)
    assert r.status == "completed" and r.text and r.text.format and r.text.format.type == "json_schema"
    jsonschema.validate(json.loads(r.output_text), SCHEMA)
    r = client.responses.create(model="", input="Any JSON", text={"format": {"type": "json_object"}},
                                max_output_tokens=400, temperature=0)  # fmt: skip
    if r.status == "completed":
        assert isinstance(json.loads(r.output_text), dict)
    else:  # cut short: what there is still starts an object
        assert r.output_text.lstrip().startswith("{")


@pytest.mark.parametrize("seed", range(2))
def test_required_calls_one_of_the_callers_tools(client: openai.OpenAI, seed: int) -> None:
    r = client.responses.create(model="", input="Weather in Paris?", tools=[WEATHER, TIME],  # type: ignore[list-item]
                                tool_choice="required", parallel_tool_calls=False, temperature=1.0,
                                extra_body={"seed": seed})  # fmt: skip
    calls = [o for o in r.output if o.type == "function_call"]
    assert r.status == "completed" and len(calls) == 1
    assert calls[0].name in ARGS and calls[0].call_id and calls[0].status == "completed"
    jsonschema.validate(json.loads(calls[0].arguments), ARGS[calls[0].name])


def test_named_tool_streams_its_arguments(client: openai.OpenAI) -> None:
    events = list(client.responses.create(model="", input="Time?", tools=[WEATHER, TIME],  # type: ignore[list-item]
                                          tool_choice={"type": "function", "name": "get_time"},
                                          temperature=0, stream=True))  # fmt: skip
    final = events[-1]
    assert final.type == "response.completed"
    calls = [o for o in final.response.output if o.type == "function_call"]
    assert [c.name for c in calls] == ["get_time"]
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert len(done) == 1 and done[0].arguments == calls[0].arguments
    streamed = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert json.loads(streamed) == json.loads(calls[0].arguments)
    jsonschema.validate(json.loads(calls[0].arguments), ARGS["get_time"])


def test_tool_loop_with_function_call_output(client: openai.OpenAI, server: ServerProc) -> None:
    tools: Any = [WEATHER]
    first = client.responses.create(model="", input="Weather in Oslo?", tools=tools, tool_choice="required",
                                    temperature=0)  # fmt: skip
    (call,) = [o for o in first.output if o.type == "function_call"]
    result: Any = [{"type": "function_call_output", "call_id": call.call_id, "output": '{"temp": 3}'}]
    second = client.responses.create(model="", previous_response_id=first.id, input=result,  # type: ignore[arg-type]
                                     tools=tools, tool_choice="none", text=FORMAT, temperature=0)  # fmt: skip
    assert second.status == "completed" and second.previous_response_id == first.id
    jsonschema.validate(json.loads(second.output_text), SCHEMA)
    listed = client.responses.input_items.list(second.id, order="asc").data
    kinds = [i.type for i in listed]
    assert kinds == ["message", "function_call", "function_call_output"]
    assert listed[1].id == call.id and getattr(listed[2], "call_id", None) == call.call_id
    # The same loop without stored state: the caller sends the whole conversation.
    stateless: Any = [
        {"role": "user", "content": "Weather in Oslo?"},
        call.model_dump(exclude_none=True),
        *result,
    ]
    again = client.responses.create(model="", input=stateless, tools=tools, tool_choice="none",  # type: ignore[arg-type]
                                    text=FORMAT, temperature=0, store=False)  # fmt: skip
    assert again.output_text == second.output_text


def test_max_output_tokens_streams_incomplete(client: openai.OpenAI) -> None:
    events = list(
        client.responses.create(model="", input="Go on", max_output_tokens=5, temperature=0, stream=True)
    )
    last = events[-1]
    assert last.type == "response.incomplete"
    assert last.response.incomplete_details and last.response.incomplete_details.reason == "max_output_tokens"
    assert last.response.usage and last.response.usage.output_tokens == 5
    assert client.responses.retrieve(last.response.id) == last.response


def test_previous_response_reuses_its_context(client: openai.OpenAI, server: ServerProc) -> None:
    first = client.responses.create(model="", input="A long opening question about cities and weather.",
                                    instructions="Answer briefly.", max_output_tokens=12, temperature=0)  # fmt: skip
    assert first.usage is not None
    second = client.responses.create(model="", input="And tomorrow?", previous_response_id=first.id,
                                     instructions="Answer briefly.", max_output_tokens=8, temperature=0)  # fmt: skip
    assert second.usage is not None and second.usage.input_tokens > first.usage.input_tokens
    # What the previous context held (its prompt) was not computed again.
    assert second.usage.input_tokens_details.cached_tokens == first.usage.input_tokens > 0
    # The same conversation sent whole gives the same answer: reuse changes nothing.
    whole = [
        {"role": "user", "content": "A long opening question about cities and weather."},
        {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "And tomorrow?"},
    ]
    plain = client.responses.create(model="", input=whole, instructions="Answer briefly.",  # type: ignore[arg-type]
                                    max_output_tokens=8, temperature=0, store=False)  # fmt: skip
    assert plain.output_text == second.output_text


def test_branching_twice_from_one_response(client: openai.OpenAI, server: ServerProc) -> None:
    root = client.responses.create(
        model="", input="Start of a story about a fox.", max_output_tokens=10, temperature=0
    )
    assert root.usage is not None
    kw: Any = dict(model="", previous_response_id=root.id, max_output_tokens=6, temperature=0)
    a = client.responses.create(input="Make it sad.", **kw)
    b = client.responses.create(input="Make it happy and much longer than the other.", **kw)
    for branch in (a, b):
        assert branch.usage and branch.usage.input_tokens_details.cached_tokens == root.usage.input_tokens
    assert a.usage and b.usage and a.usage.input_tokens < b.usage.input_tokens
    # Each branch continues on its own context, and the root is still there for a third.
    a2 = client.responses.create(model="", input="More.", previous_response_id=a.id, max_output_tokens=4,
                                 temperature=0)  # fmt: skip
    assert a2.usage and a2.usage.input_tokens_details.cached_tokens == a.usage.input_tokens
    c = client.responses.create(input="Make it short.", **kw)
    assert c.usage and c.usage.input_tokens_details.cached_tokens == root.usage.input_tokens
    listed = [i.id for i in client.responses.input_items.list(a2.id, order="asc", limit=100).data]
    assert len(listed) == 5 and listed[1] == root.output[0].id  # input, output, input, output, input


def test_store_false_keeps_nothing(client: openai.OpenAI, server: ServerProc) -> None:
    before = contexts(server)
    r = client.responses.create(model="", input="Forget me.", store=False, max_output_tokens=4, temperature=0)
    assert r.status == "incomplete" and contexts(server) == before
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError) as e:
        client.responses.create(model="", input="x", previous_response_id=r.id, max_output_tokens=2)
    body: Any = e.value.body
    assert body and body.get("param") == "previous_response_id"
    # A stored turn continued with store false leaves the stored one and its context as they were.
    kept = client.responses.create(model="", input="Keep me.", max_output_tokens=4, temperature=0)
    held = contexts(server)
    client.responses.create(
        model="", input="x", previous_response_id=kept.id, store=False, max_output_tokens=2
    )
    deadline = time.monotonic() + 10
    while contexts(server) != held and time.monotonic() < deadline:
        time.sleep(0.1)
    assert contexts(server) == held


def test_delete_then_404(client: openai.OpenAI, server: ServerProc) -> None:
    r = client.responses.create(model="", input="Delete me.", max_output_tokens=4, temperature=0)
    before = contexts(server)
    gone = httpx.delete(server.url + f"/responses/{r.id}", timeout=30).json()
    assert gone == {"id": r.id, "object": "response.deleted", "deleted": True}
    assert len(contexts(server)) == len(before) - 1  # its context went with it
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list(r.id)


def test_input_items_pages(client: openai.OpenAI) -> None:
    words = ["one", "two", "three", "four", "five"]
    r = client.responses.create(model="", input=[{"role": "user", "content": w} for w in words],  # type: ignore[misc]
                                max_output_tokens=2, temperature=0)  # fmt: skip
    newest = client.responses.input_items.list(r.id)
    texts = [i.content[0].text for i in newest.data]  # type: ignore[union-attr,index]
    assert texts == words[::-1] and newest.has_more is False and newest.first_id == newest.data[0].id  # type: ignore[attr-defined]
    ids, after, pages = [], None, 0
    while True:
        kw: Any = {"after": after} if after else {}
        p = client.responses.input_items.list(r.id, order="asc", limit=2, **kw)
        ids += [i.id for i in p.data]
        pages += 1
        if not p.has_more:
            break
        after = p.last_id  # type: ignore[attr-defined]
    assert pages == 3 and ids == [i.id for i in newest.data][::-1]
    # The SDK's auto-pagination walks the same pages.
    assert [i.id for i in client.responses.input_items.list(r.id, order="asc", limit=2)] == ids


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"input": "x", "background": True}, 400, "background"),
        ({"input": "x", "tools": [{"type": "web_search_preview"}]}, 400, "tools[0].type"),
        ({"input": "x", "tool_choice": "required"}, 400, "tool_choice"),
        ({"input": "x", "text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": "object",
          "properties": {"a": {"type": "array", "uniqueItems": True}}}, "strict": True}}}, 400, "text.format.schema"),
        ({"input": "x", "conversation": "conv_1"}, 400, "conversation"),
        ({"input": "x", "temperature": 3}, 400, "temperature"),
        ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}, 400,
         "input[0].content[0].type"),
        ({"input": "x", "previous_response_id": "resp_nope"}, 404, "previous_response_id"),
        ({"input": "x", "model": "no-such-model"}, 404, "model"),
        ({"input": "x" * 40000}, 400, "input"),
    ],
)  # fmt: skip
def test_bad_requests_are_clear_4xx(
    server: ServerProc, body: dict[str, Any], status: int, param: str | None
) -> None:
    r = httpx.post(server.url + "/responses", json=body, timeout=60)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["message"] and error["param"] == param


def test_bad_bodies_and_paths(server: ServerProc) -> None:
    r = httpx.post(server.url + "/responses", content=b"{nope", timeout=30)
    assert r.status_code == 400
    r = httpx.post(server.url + "/responses", json=[1, 2], timeout=30)
    assert r.status_code == 400
    rid = httpx.post(
        server.url + "/responses", json={"input": "x", "max_output_tokens": 2}, timeout=60
    ).json()["id"]
    r = httpx.get(server.url + f"/responses/{rid}/input_items", params={"limit": "1000"}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "limit"
    r = httpx.get(server.url + f"/responses/{rid}/input_items", params={"after": "item_nope"}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "after"


def test_another_principals_response_is_not_found(tiny_model_path: Path, tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"keys": [{"key": "k-ann", "principal": "ann", "role": "user"},
                                         {"key": "k-bob", "principal": "bob", "role": "user"},
                                         {"key": "k-cy", "principal": "cy", "limits": {"contexts": 1}}]}))  # fmt: skip
    with start_server(tiny_model_path, "-keys", str(keys), home=tmp_path / "h") as s:
        ann, bob = client_for(s, "k-ann"), client_for(s, "k-bob")
        r = ann.responses.create(model="", input="Mine.", max_output_tokens=3, temperature=0)
        assert ann.responses.retrieve(r.id).id == r.id
        with pytest.raises(openai.NotFoundError):
            bob.responses.retrieve(r.id)
        with pytest.raises(openai.NotFoundError):
            bob.responses.input_items.list(r.id)
        with pytest.raises(openai.NotFoundError):
            bob.responses.create(model="", input="x", previous_response_id=r.id, max_output_tokens=2)
        with pytest.raises(openai.NotFoundError):
            bob.responses.delete(r.id)
        with pytest.raises(openai.AuthenticationError):
            client_for(s, "wrong").responses.retrieve(r.id)
        ref: Any = [{"type": "item_reference", "id": r.output[0].id}]
        with pytest.raises(openai.NotFoundError):  # another principal's items are not found either
            bob.responses.create(model="", input=ref, max_output_tokens=2)
        assert ann.responses.create(model="", input=ref, max_output_tokens=2).status == "incomplete"
        nxt = ann.responses.create(model="", input="More.", previous_response_id=r.id, max_output_tokens=2)
        assert nxt.usage and nxt.usage.input_tokens_details.cached_tokens > 0
        # Past its context quota a key still gets stored responses, only without contexts.
        cy = client_for(s, "k-cy")
        held = lambda: httpx.get(s.url + "/contexts", headers={"Authorization": "Bearer k-cy"}).json()["data"]  # noqa: E731
        first = cy.responses.create(model="", input="One.", max_output_tokens=2, temperature=0)
        assert len(held()) == 1
        second = cy.responses.create(model="", input="Two.", max_output_tokens=2, temperature=0)
        third = cy.responses.create(
            model="", input="Go.", previous_response_id=second.id, max_output_tokens=2
        )
        assert third.status == "incomplete" and cy.responses.retrieve(second.id).id == second.id
        assert len(held()) == 1 and first.status == "incomplete"


def test_client_that_leaves_frees_the_generation(server: ServerProc) -> None:
    body = {"input": "Talk for a long time.", "max_output_tokens": 3000, "stream": True, "temperature": 1.0}
    with httpx.stream("POST", server.url + "/responses", json=body, timeout=60) as r:
        seen = 0
        for line in r.iter_lines():
            seen += line.startswith("data: ")
            if seen > 5:
                break
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        health = httpx.get(server.base + "/health", timeout=10).json()["models"][0]
        if health["running"] == 0:
            break
        time.sleep(0.1)
    assert health["running"] == 0 and health["aborted"] >= 1


def test_reasoning_summary_and_content(think_server: ServerProc) -> None:
    c = client_for(think_server)
    r = c.responses.create(model="", input="Why is the sky blue?", reasoning={"effort": "low", "summary": "auto"},
                           max_output_tokens=60, temperature=0)  # fmt: skip
    first = r.output[0]
    assert first.type == "reasoning" and first.summary and first.summary[0].text and not first.content
    assert r.usage and 0 < r.usage.output_tokens_details.reasoning_tokens <= r.usage.output_tokens
    assert "<think>" not in r.output_text and "</think>" not in r.output_text
    events = list(c.responses.create(model="", input="Why is the sky blue?", max_output_tokens=60, temperature=0,
                                     reasoning={"summary": "auto"}, stream=True))  # fmt: skip
    summary = "".join(e.delta for e in events if e.type == "response.reasoning_summary_text.delta")
    assert summary == first.summary[0].text
    types = [e.type for e in events]
    assert types.index("response.reasoning_summary_part.added") < types.index(
        "response.reasoning_summary_part.done"
    )
    plain = c.responses.create(model="", input="Why is the sky blue?", max_output_tokens=60, temperature=0)
    first_plain = plain.output[0]
    assert first_plain.type == "reasoning" and first_plain.summary == []
    assert first_plain.content and first_plain.content[0].text == first.summary[0].text
    off = c.responses.create(model="", input="Why is the sky blue?", reasoning={"effort": "none"},
                             max_output_tokens=20, temperature=0)  # fmt: skip
    assert all(o.type != "reasoning" for o in off.output)
    assert off.usage and off.usage.output_tokens_details.reasoning_tokens == 0


def test_include_logprobs_whole_and_streamed(client: openai.OpenAI) -> None:
    kw: Any = dict(model="", input="Say something.", max_output_tokens=6, temperature=0,
                   include=["message.output_text.logprobs"], top_logprobs=2)  # fmt: skip
    r = client.responses.create(**kw)
    [part] = [p for item in r.output if item.type == "message" for p in item.content]
    assert part.type == "output_text" and part.logprobs is not None and r.usage is not None
    assert len(part.logprobs) == r.usage.output_tokens == 6
    assert all(len(lp.top_logprobs) == 2 and lp.logprob <= 0 for lp in part.logprobs)
    assert "".join(lp.token for lp in part.logprobs) == part.text
    streamed: list[Any] = []
    final: Any = None
    with client.responses.stream(**kw) as stream:
        for ev in stream:
            if ev.type == "response.output_text.delta":
                streamed += ev.logprobs
            elif ev.type in ("response.completed", "response.incomplete"):
                final = ev.response
    [again] = [p for item in final.output if item.type == "message" for p in item.content]
    assert [lp.token for lp in streamed] == [lp.token for lp in again.logprobs or []] == [lp.token for lp in part.logprobs]
    plain = client.responses.create(model="", input="Say something.", max_output_tokens=6, temperature=0,
                                    include=["reasoning.encrypted_content", "file_search_call.results"])  # fmt: skip
    [bare] = [p for item in plain.output if item.type == "message" for p in item.content]
    assert bare.text == part.text and bare.logprobs == []
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model="", input="x", include=["web_search_call.action.sources"])
    assert e.value.body["param"] == "include[0]"  # type: ignore[index]


def test_truncation_auto_drops_the_oldest_turns(client: openai.OpenAI, server: ServerProc) -> None:
    long = "many words in a long message " * 250  # well over half the 4096-token context
    items: Any = [{"role": "user", "content": "first " + long}, {"role": "assistant", "content": "ok"},
                  {"role": "user", "content": "second " + long}, {"role": "assistant", "content": "ok"},
                  {"role": "user", "content": "And now?"}]  # fmt: skip
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model="", input=items, max_output_tokens=2)
    r = client.responses.create(model="", input=items, max_output_tokens=2, truncation="auto", temperature=0)
    assert r.truncation == "auto" and r.usage is not None
    # the first turn went, the second stayed: as many tokens as the last three items alone
    alone = client.responses.create(model="", input=items[2:], max_output_tokens=2, temperature=0)
    assert alone.usage is not None and r.usage.input_tokens == alone.usage.input_tokens < 4096
    assert len(client.responses.input_items.list(r.id, limit=10).data) == 5  # what was sent, all of it
    short = client.responses.create(model="", input=items[4:], max_output_tokens=2, truncation="auto")
    assert short.usage is not None and short.usage.input_tokens < alone.usage.input_tokens


def test_item_reference_resolves_a_stored_item(client: openai.OpenAI) -> None:
    first = client.responses.create(model="", input="Remember the word apple.", max_output_tokens=4)
    message = first.output[-1]
    refs: Any = [{"type": "item_reference", "id": message.id}, {"role": "user", "content": "Again?"}]
    r = client.responses.create(model="", input=refs, max_output_tokens=2, temperature=0)
    listed = client.responses.input_items.list(r.id, order="asc").data
    assert [i.id for i in listed][0] == message.id and listed[0].type == "message"
    plain = client.responses.create(model="", input=refs[1:], max_output_tokens=2, temperature=0)
    assert r.usage is not None and plain.usage is not None and r.usage.input_tokens > plain.usage.input_tokens
    with pytest.raises(openai.NotFoundError) as e:
        client.responses.create(model="", input=[{"type": "item_reference", "id": "msg_nope"}])
    assert e.value.body["param"] == "input[0].id"  # type: ignore[index]

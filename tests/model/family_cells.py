"""The checks of the family matrix (tests/model/test_families.py), one function per check
and route. Each sends real requests to a running server (the official `openai` and
`anthropic` clients; plain HTTP for Ollama's API) and asserts what the server guarantees on
random weights: the shapes of the replies, calls of the offered tools with schema-valid
arguments under `required` or a named tool, schema-valid objects, reasoning kept apart
from the answer. Raises AssertionError (with what came back) when a check fails."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import jsonschema
import openai

from llamay.testing.families import Family

WEATHER_ARGS = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 8}, "unit": {"enum": ["c", "f"]}},
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TIME_ARGS = {
    "type": "object",
    "properties": {"zone": {"enum": ["utc", "cet"]}},
    "required": ["zone"],
    "additionalProperties": False,
}
SCHEMAS = {"get_weather": WEATHER_ARGS, "get_time": TIME_ARGS}
OPENAI_TOOLS: Any = [
    {"type": "function", "function": {"name": n, "description": f"{n} tool", "parameters": s}}
    for n, s in SCHEMAS.items()
]
ANTHROPIC_TOOLS: Any = [{"name": n, "description": f"{n} tool", "input_schema": s} for n, s in SCHEMAS.items()]
ANSWER = {
    "type": "object",
    "properties": {"answer": {"type": "string", "maxLength": 12}, "sure": {"type": "boolean"}},
    "required": ["answer", "sure"],
    "additionalProperties": False,
}
ASK = "What is the weather in Paris?"
SYSTEM = "You are terse. Answer in one word."
SHORT = 8  # tokens of free text: enough to show a reply, little to compute
CONSTRAINED = 96  # room for thinking (the budget) and a call or two, or an object
BUDGET = 16  # thinking budget of the thinking checks (the server's default, -reasoning-budget)
THINK_ROOM = 40  # max_tokens of the thinking checks: the budget, the close, then an answer
# Think and channel markers: none of them may reach an answer.
MARKERS = ("<think>", "</think>", "[THINK]", "[/THINK]", "<|channel|>", "<|START_THINKING|>", "<|END_THINKING|>",
           "<|channel>", "<channel|>")  # fmt: skip
CLOSERS = ("</think>", "[/THINK]", "<|END_THINKING|>", "<channel|>", "<|end|>")


@dataclass(frozen=True)
class Server:
    base: str
    family: Family

    def openai(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base + "/v1", api_key="x", max_retries=0, timeout=300)

    def anthropic(self) -> anthropic.Anthropic:
        return anthropic.Anthropic(base_url=self.base, api_key="x", max_retries=0, timeout=300)

    def ollama(self, body: dict[str, Any], *, stream: bool = False) -> list[dict[str, Any]]:
        """POST /api/chat; the reply's JSON objects (one, or the streamed lines)."""
        body = {"model": "", "stream": stream, "options": {"temperature": 0, "seed": 1}, **body}
        r = httpx.post(self.base + "/api/chat", json=body, timeout=300)
        assert r.status_code == 200, f"HTTP {r.status_code}: {r.text[:400]}"
        return [json.loads(line) for line in r.text.splitlines() if line.strip()]


def _valid_call(name: str, arguments: Any, allowed: tuple[str, ...] = tuple(SCHEMAS)) -> None:
    assert name in allowed, f"call of {name!r}, not one of {allowed}"
    args = json.loads(arguments) if isinstance(arguments, str) else arguments
    jsonschema.validate(args, SCHEMAS[name])


def _clean(text: str, reasoning: str = "") -> None:
    """The answer holds no think block: it opens with no marker, and holds neither a close
    marker (the server forces one; the split must take it) nor the reasoning."""
    head = text.lstrip()
    opened = [m for m in MARKERS if head.startswith(m)]
    closed = [m for m in CLOSERS if m in text]
    assert not opened and not closed, f"think markers {opened + closed} in the answer: {text[:300]!r}"
    assert not reasoning or reasoning not in text, "the reasoning is in the answer"


def _history_openai() -> list[dict[str, Any]]:
    calls = [
        {"id": "call_w1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "c"}'}},
        {"id": "call_t1", "type": "function", "function": {"name": "get_time", "arguments": '{"zone": "cet"}'}},
    ]  # fmt: skip
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": ASK},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "call_w1", "content": "21C, sunny"},
        {"role": "tool", "tool_call_id": "call_t1", "content": [{"type": "text", "text": "14:05"}]},
        {"role": "user", "content": "And tomorrow?"},
    ]


# -- OpenAI ----------------------------------------------------------------------------------


def _oa(s: Server, **kw: Any) -> Any:
    kw.setdefault("max_tokens", SHORT)
    kw.setdefault("messages", [{"role": "user", "content": ASK}])
    return s.openai().chat.completions.create(model="", temperature=0, seed=1, **kw)


def _oa_reasoning(message: Any) -> str:
    return (message.model_extra or {}).get("reasoning_content") or ""


def openai_plain(s: Server) -> None:
    r = _oa(s)
    c = r.choices[0]
    assert c.finish_reason in ("stop", "length") and isinstance(c.message.content, str)
    assert r.usage is not None and r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0


def openai_system(s: Server) -> None:
    r = _oa(s, messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": ASK}])
    assert r.choices[0].finish_reason in ("stop", "length")


def openai_auto(s: Server) -> None:
    r = _oa(s, tools=OPENAI_TOOLS, tool_choice="auto", max_tokens=CONSTRAINED)
    m = r.choices[0].message
    for call in m.tool_calls or []:
        _valid_call(call.function.name, call.function.arguments)
    if not m.tool_calls:
        _clean(m.content or "")


def _oa_calls(s: Server, choice: Any, parallel: bool | None, n: int | None = None) -> list[Any]:
    r = _oa(s, tools=OPENAI_TOOLS, tool_choice=choice, max_tokens=CONSTRAINED,
            **({} if parallel is None else {"parallel_tool_calls": parallel}))  # fmt: skip
    c = r.choices[0]
    assert c.finish_reason == "tool_calls", f"finish {c.finish_reason}: {c.message}"
    calls = c.message.tool_calls or []
    assert calls if n is None else len(calls) == n, f"{len(calls)} calls: {calls}"
    for call in calls:
        assert call.id and call.type == "function"
        _valid_call(call.function.name, call.function.arguments)
    assert len({call.id for call in calls}) == len(calls)
    return calls


def openai_required(s: Server) -> None:
    _oa_calls(s, "required", False, 1)


def openai_named(s: Server) -> None:
    calls = _oa_calls(s, {"type": "function", "function": {"name": "get_time"}}, None, 1)
    assert calls[0].function.name == "get_time"


def openai_parallel(s: Server) -> None:
    # Several calls allowed: a model that goes on calling may run out of tokens in a call,
    # so a "length" finish is the model's; every call it finished is valid.
    r = _oa(s, tools=OPENAI_TOOLS, tool_choice="required", max_tokens=CONSTRAINED, parallel_tool_calls=True)
    c = r.choices[0]
    calls = c.message.tool_calls or []
    assert c.finish_reason in ("tool_calls", "length") and calls, f"finish {c.finish_reason}: {c.message}"
    for i, call in enumerate(calls):
        if c.finish_reason == "tool_calls" or i < len(calls) - 1:
            _valid_call(call.function.name, call.function.arguments)


def openai_stream(s: Server) -> None:
    stream = s.openai().chat.completions.create(
        model="", messages=[{"role": "user", "content": ASK}], tools=OPENAI_TOOLS, tool_choice="required",
        parallel_tool_calls=False, max_tokens=CONSTRAINED, temperature=0, seed=1, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in stream:
        for choice in chunk.choices:
            for d in choice.delta.tool_calls or []:
                call = calls.setdefault(d.index, {"id": "", "name": "", "args": ""})
                call["id"] += d.id or ""
                if d.function is not None:
                    call["name"] += d.function.name or ""
                    call["args"] += d.function.arguments or ""
            finish = choice.finish_reason or finish
    assert finish == "tool_calls" and calls, f"finish {finish}, calls {calls}"
    for call in calls.values():
        assert call["id"]
        _valid_call(call["name"], call["args"])


def openai_history(s: Server) -> None:
    r = _oa(s, messages=_history_openai(), tools=OPENAI_TOOLS, max_tokens=CONSTRAINED)
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")


def openai_json(s: Server) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": ANSWER, "strict": True}}
    r = _oa(s, response_format=fmt, max_tokens=CONSTRAINED)
    m = r.choices[0].message
    assert r.choices[0].finish_reason == "stop", f"finish {r.choices[0].finish_reason}: {m}"
    jsonschema.validate(json.loads(m.content or ""), ANSWER)


def openai_think_on(s: Server) -> None:
    r = _oa(s, max_tokens=THINK_ROOM, extra_body={"reasoning_budget_tokens": BUDGET})
    m = r.choices[0].message
    reasoning, content = _oa_reasoning(m), m.content or ""
    _clean(content, reasoning)
    details = r.usage.completion_tokens_details if r.usage is not None else None
    counted = (details.reasoning_tokens or 0) if details is not None else 0
    if s.family.thinks:
        assert reasoning and content, f"reasoning {reasoning!r}, content {content!r}"
        assert 0 < counted <= r.usage.completion_tokens if r.usage else False, f"usage {r.usage}"
    else:
        assert not reasoning and counted == 0, f"reasoning {reasoning!r} from a model that does not think"


def openai_think_off(s: Server) -> None:
    r = _oa(s, max_tokens=SHORT, reasoning_effort="none")
    m = r.choices[0].message
    _clean(m.content or "")
    if not s.family.thinks or s.family.off_switch:
        assert not _oa_reasoning(m), f"reasoning with thinking off: {_oa_reasoning(m)!r}"


# -- Anthropic -------------------------------------------------------------------------------


def _an(s: Server, **kw: Any) -> Any:
    kw.setdefault("max_tokens", SHORT)
    kw.setdefault("messages", [{"role": "user", "content": ASK}])
    extra = {"temperature": 0, **kw.pop("extra_body", {})}
    return s.anthropic().messages.create(model="", extra_body=extra, **kw)


def _an_text(m: Any) -> str:
    return "".join(b.text for b in m.content if b.type == "text")


def anthropic_plain(s: Server) -> None:
    m = _an(s)
    assert m.stop_reason in ("end_turn", "max_tokens") and m.usage.input_tokens > 0
    assert isinstance(_an_text(m), str)


def anthropic_system(s: Server) -> None:
    m = _an(s, system=SYSTEM)
    assert m.stop_reason in ("end_turn", "max_tokens")


def anthropic_auto(s: Server) -> None:
    m = _an(s, tools=ANTHROPIC_TOOLS, tool_choice={"type": "auto"}, max_tokens=CONSTRAINED)
    for b in m.content:
        if b.type == "tool_use":
            _valid_call(b.name, b.input)
    _clean(_an_text(m))


def _an_calls(s: Server, choice: dict[str, Any], n: int | None) -> list[Any]:
    m = _an(s, tools=ANTHROPIC_TOOLS, tool_choice=choice, max_tokens=CONSTRAINED)
    calls = [b for b in m.content if b.type == "tool_use"]
    assert m.stop_reason == "tool_use", f"stop {m.stop_reason}: {m.content}"
    assert calls if n is None else len(calls) == n, f"{len(calls)} calls: {m.content}"
    for b in calls:
        assert b.id.startswith("toolu_")
        _valid_call(b.name, b.input)
    return calls


def anthropic_required(s: Server) -> None:
    _an_calls(s, {"type": "any", "disable_parallel_tool_use": True}, 1)


def anthropic_named(s: Server) -> None:
    calls = _an_calls(s, {"type": "tool", "name": "get_time"}, 1)
    assert calls[0].name == "get_time"


def anthropic_parallel(s: Server) -> None:
    # As openai_parallel: running out of tokens in a later call is the model's doing.
    choice = {"type": "any", "disable_parallel_tool_use": False}
    m = _an(s, tools=ANTHROPIC_TOOLS, tool_choice=choice, max_tokens=CONSTRAINED)
    calls = [b for b in m.content if b.type == "tool_use"]
    assert m.stop_reason in ("tool_use", "max_tokens") and calls, f"stop {m.stop_reason}: {m.content}"
    for i, b in enumerate(calls):
        if m.stop_reason == "tool_use" or i < len(calls) - 1:
            _valid_call(b.name, b.input)


def anthropic_stream(s: Server) -> None:
    with s.anthropic().messages.stream(
        model="", max_tokens=CONSTRAINED, messages=[{"role": "user", "content": ASK}], tools=ANTHROPIC_TOOLS,
        tool_choice={"type": "any", "disable_parallel_tool_use": True}, extra_body={"temperature": 0},
    ) as stream:  # fmt: skip
        partial: dict[int, str] = {}
        for event in stream:
            if event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                partial[event.index] = partial.get(event.index, "") + event.delta.partial_json
        final = stream.get_final_message()
    calls = [(i, b) for i, b in enumerate(final.content) if b.type == "tool_use"]
    assert final.stop_reason == "tool_use" and calls, f"stop {final.stop_reason}: {final.content}"
    for i, b in calls:
        assert json.loads(partial.get(i) or "{}") == b.input, "streamed input differs from the final one"
        _valid_call(b.name, b.input)


def anthropic_history(s: Server) -> None:
    messages = [
        {"role": "user", "content": ASK},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_w1", "name": "get_weather", "input": {"city": "Paris", "unit": "c"}},
            {"type": "tool_use", "id": "toolu_t1", "name": "get_time", "input": {"zone": "cet"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_w1", "content": "21C, sunny"},
            {"type": "tool_result", "tool_use_id": "toolu_t1", "content": [{"type": "text", "text": "14:05"}]},
            {"type": "text", "text": "And tomorrow?"},
        ]},
    ]  # fmt: skip
    m = _an(s, system=SYSTEM, messages=messages, tools=ANTHROPIC_TOOLS, max_tokens=CONSTRAINED)
    assert m.stop_reason in ("end_turn", "max_tokens", "tool_use")


def anthropic_json(s: Server) -> None:
    m = _an(s, max_tokens=CONSTRAINED, extra_body={"output_config": {"format": {"type": "json_schema", "schema": ANSWER}}})
    assert m.stop_reason == "end_turn", f"stop {m.stop_reason}: {m.content}"
    jsonschema.validate(json.loads(_an_text(m)), ANSWER)


def anthropic_think_on(s: Server) -> None:
    m = _an(s, max_tokens=THINK_ROOM, thinking={"type": "enabled", "budget_tokens": BUDGET})
    thought = "".join(b.thinking for b in m.content if b.type == "thinking")
    text = _an_text(m)
    _clean(text, thought)
    if s.family.thinks:
        assert thought and text, f"thinking {thought!r}, text {text!r}"
    else:
        assert not thought, f"thinking {thought!r} from a model that does not think"


def anthropic_think_off(s: Server) -> None:
    m = _an(s, thinking={"type": "disabled"})
    _clean(_an_text(m))
    if not s.family.thinks or s.family.off_switch:
        assert not [b for b in m.content if b.type == "thinking"], f"thinking blocks with thinking off: {m.content}"


# -- Ollama ----------------------------------------------------------------------------------

OLLAMA_TOOLS = [{"type": "function", "function": t["function"]} for t in OPENAI_TOOLS]


def _ol(s: Server, *, stream: bool = False, num_predict: int = SHORT, **body: Any) -> list[dict[str, Any]]:
    body.setdefault("messages", [{"role": "user", "content": ASK}])
    options = {"temperature": 0, "seed": 1, "num_predict": num_predict}
    return s.ollama({**body, "options": options}, stream=stream)


def ollama_plain(s: Server) -> None:
    (r,) = _ol(s)
    assert r["done"] and r["done_reason"] in ("stop", "length") and isinstance(r["message"]["content"], str)
    assert r["prompt_eval_count"] > 0 and r["eval_count"] > 0


def ollama_system(s: Server) -> None:
    (r,) = _ol(s, messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": ASK}])
    assert r["done"]


def ollama_auto(s: Server) -> None:
    (r,) = _ol(s, tools=OLLAMA_TOOLS, num_predict=CONSTRAINED)
    for call in r["message"].get("tool_calls") or []:
        _valid_call(call["function"]["name"], call["function"]["arguments"])
    _clean(r["message"]["content"])


def ollama_stream(s: Server) -> None:
    lines = _ol(s, tools=OLLAMA_TOOLS, stream=True, num_predict=CONSTRAINED)
    assert lines and lines[-1]["done"] and not any(x["done"] for x in lines[:-1])
    text = "".join(x["message"].get("content", "") for x in lines)
    (whole,) = _ol(s, tools=OLLAMA_TOOLS, num_predict=CONSTRAINED)
    assert text == whole["message"]["content"], "streamed text differs from the whole reply"
    def calls(messages: list[dict[str, Any]]) -> list[tuple[str, Any]]:  # ids are fresh each time
        return [(c["function"]["name"], c["function"]["arguments"]) for m in messages for c in m.get("tool_calls") or []]

    assert calls([x["message"] for x in lines]) == calls([whole["message"]]), "streamed calls differ"
    for name, arguments in calls([whole["message"]]):
        _valid_call(name, arguments)


def ollama_history(s: Server) -> None:
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": ASK},
        {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}},
            {"function": {"name": "get_time", "arguments": {"zone": "cet"}}},
        ]},
        {"role": "tool", "tool_name": "get_weather", "content": "21C, sunny"},
        {"role": "tool", "tool_name": "get_time", "content": "14:05"},
        {"role": "user", "content": "And tomorrow?"},
    ]  # fmt: skip
    (r,) = _ol(s, messages=messages, tools=OLLAMA_TOOLS, num_predict=16)
    assert r["done"]


def ollama_json(s: Server) -> None:
    (r,) = _ol(s, format=ANSWER, num_predict=CONSTRAINED)
    assert r["done_reason"] == "stop", f"done {r['done_reason']}: {r['message']}"
    jsonschema.validate(json.loads(r["message"]["content"]), ANSWER)


def ollama_think_on(s: Server) -> None:
    (r,) = _ol(s, think=True, num_predict=THINK_ROOM)  # the server's default budget applies
    thought, content = r["message"].get("thinking") or "", r["message"]["content"]
    _clean(content, thought)
    if s.family.thinks:
        assert thought and content, f"thinking {thought!r}, content {content!r}"
    else:
        assert not thought, f"thinking {thought!r} from a model that does not think"


def ollama_think_off(s: Server) -> None:
    (r,) = _ol(s, think=False)
    _clean(r["message"]["content"])
    assert not r["message"].get("thinking"), "thinking shown with think: false"


Check = Callable[[Server], None]
CHECKS: dict[str, dict[str, Check]] = {
    "openai": {n[len("openai_"):]: f for n, f in globals().items() if n.startswith("openai_") and callable(f)},
    "anthropic": {n[len("anthropic_"):]: f for n, f in globals().items() if n.startswith("anthropic_") and callable(f)},
    "ollama": {n[len("ollama_"):]: f for n, f in globals().items() if n.startswith("ollama_") and callable(f)},
}  # fmt: skip

"""Real templates (llama.cpp's `models/templates/*.jinja`) meeting what clients send: each
case failed or rendered the wrong prompt before its fix in `chat/template.py`,
`chat/polyfill.py` or `chat/flow.py`."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llamay.api.fields import Fields
from llamay.api.openai.schemas import chat_options
from llamay.chat.flow import ChatOptions, asked_variables
from llamay.chat.template import ChatTemplate, normalize_messages
from llamay.errors import InvalidRequest
from llamay.testing.families import llama_cpp_models

TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def template(stem: str) -> ChatTemplate:
    return ChatTemplate.from_file(llama_cpp_models() / "templates" / f"{stem}.jinja", bos_token="<s>")


def call(n: int, city: str = "Paris") -> dict[str, Any]:
    arguments = json.dumps({"city": city})
    return {
        "id": f"call_{n}",
        "type": "function",
        "function": {"name": "get_weather", "arguments": arguments},
    }


def history(content: Any, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": content, "tool_calls": calls},
        *({"role": "tool", "tool_call_id": c["id"], "content": f"sunny {i}"} for i, c in enumerate(calls)),
        {"role": "user", "content": "Thanks"},
    ]


def test_tojson_writes_a_filter_chains_generator_as_a_list() -> None:
    # llama.cpp's own R1 template: `tools | map(attribute='function') | tojson(indent=2)`.
    out = template("llama-cpp-deepseek-r1").render([{"role": "user", "content": "hi"}], tools=[TOOL])
    listed = out[out.index("requests: ") + len("requests: ") : out.index("\n\nExample")]
    assert json.loads(listed) == [TOOL["function"]]


@pytest.mark.parametrize("stem", ["Kimi-K2-Instruct", "Kimi-K2-Thinking"])
def test_kimi_templates_keep_their_queue_of_call_ids(stem: str) -> None:
    # The template appends each call's id to a list of its own and pops one per result.
    out = template(stem).render(history(None, [call(1), call(2, "Rome")]), tools=[TOOL])
    first, second = "functions.get_weather:0", "functions.get_weather:1"
    assert f"<|tool_call_begin|>{first}" in out and f"<|tool_call_begin|>{second}" in out
    assert f"## Return of {first}\nsunny 0" in out and f"## Return of {second}\nsunny 1" in out


def test_lists_a_template_is_given_stay_immutable() -> None:
    given = ChatTemplate("{{ tools[0].function.parameters.required.append('x') }}")
    with pytest.raises(InvalidRequest, match="unsafe"):
        given.render([{"role": "user", "content": "hi"}], tools=[TOOL])
    assert TOOL["function"]["parameters"]["required"] == ["city"]  # type: ignore[index]
    own = ChatTemplate(
        "{% set q = [] %}{% set _ = q.append(1) %}{% set _ = q.extend([2, 3]) %}{{ q.pop(0) }}{{ q }}"
    )
    assert own.render([{"role": "user", "content": "hi"}]) == "1[2, 3]"


def test_deeply_nested_arguments_are_a_400() -> None:
    deep = {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"a":' * 100_000}}
    messages = [{"role": "assistant", "content": None, "tool_calls": [deep]}]
    with pytest.raises(InvalidRequest, match=r"tool_calls\[0\]\.function\.arguments nests too deeply"):
        normalize_messages(messages)
    with pytest.raises(InvalidRequest):
        template("Qwen-Qwen3-0.6B").render(messages)


def test_gpt_oss_null_thinking_is_an_absent_one() -> None:
    # Ollama's and OpenAI-style clients send optional fields as null; the template tests
    # `"thinking" in message`, then `'...' in message.thinking`.
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello", "thinking": None, "reasoning_content": None},
        {"role": "user", "content": "again"},
    ]
    out = template("openai-gpt-oss-120b").render(messages)
    assert "<|start|>assistant<|channel|>final<|message|>hello<|end|>" in out
    assert normalize_messages(messages)[1] == {"role": "assistant", "content": "hello"}


def test_gpt_oss_content_null_with_a_call() -> None:
    out = template("openai-gpt-oss-120b").render(history(None, [call(1)]), tools=[TOOL])
    assert '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"' not in out
    assert "to=functions.get_weather<|channel|>commentary json<|message|>" in out
    assert "None" not in out and "analysis<|message|><|end|>" not in out


@pytest.mark.parametrize("content", [None, "", "Let me look."])
def test_r1_distill_llama_shows_calls_whatever_the_content(content: str | None) -> None:
    # Its template writes a turn's calls only in its `content is none` branch; Ollama's
    # clients always send "" and some send text with the calls.
    tpl = template("deepseek-ai-DeepSeek-R1-Distill-Llama-8B")
    assert tpl.needs.null_calls
    out = tpl.render(history(content, [call(1)]), tools=[TOOL])
    assert '<｜tool▁sep｜>get_weather\n```json\n{"city": "Paris"}\n```' in out
    assert ("<｜Assistant｜>Let me look.<｜end▁of▁sentence｜>" in out) == bool(content)


def test_r1_distill_qwen_needs_no_null_calls() -> None:
    # Its template branches on `tool_calls`, not on the content.
    assert not template("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B").needs.null_calls


def asked(stem: str, effort: str | None, thinking: bool = True) -> str:
    tpl = template(stem)
    opts = ChatOptions(messages=[], thinking=thinking, effort=effort)
    return tpl.render([{"role": "user", "content": "hi"}], **asked_variables(tpl.variables, opts))


def test_granite_thinks_when_asked() -> None:
    instruction = "Write your thoughts between <think></think>"
    assert instruction in asked("ibm-granite-granite-3.3-2B-Instruct", "on")
    assert instruction in asked("ibm-granite-granite-3.3-2B-Instruct", "high")
    assert instruction not in asked("ibm-granite-granite-3.3-2B-Instruct", None)
    assert instruction not in asked("ibm-granite-granite-3.3-2B-Instruct", "on", thinking=False)


@pytest.mark.parametrize(
    ("effort", "said"), [("high", "high"), ("minimal", "low"), ("on", "medium"), (None, "medium")]
)
def test_gpt_oss_is_told_the_effort_asked_for(effort: str | None, said: str) -> None:
    assert f"Reasoning: {said}\n" in asked("openai-gpt-oss-120b", effort)


@pytest.mark.parametrize(
    ("body", "effort"),
    [
        ({}, None),
        ({"reasoning_effort": "high"}, "high"),
        ({"reasoning_effort": "none"}, None),
        ({"chat_template_kwargs": {"enable_thinking": True}}, "on"),
        ({"reasoning_budget_tokens": 300}, "on"),
    ],
)
def test_openai_body_names_the_thinking_it_asks_for(body: dict[str, Any], effort: str | None) -> None:
    assert chat_options(Fields(body), [], None).effort == effort

"""Ollama request parsing: options with Ollama's defaults, keep_alive durations, format,
think, messages; every bad field is a 400 naming it."""

from __future__ import annotations

from typing import Any

import pytest

from llamay.api.ollama.schemas import parse_chat, parse_generate, parse_keep_alive, parse_options
from llamay.errors import InvalidRequest
from llamay.types import DRY_BREAKERS, SamplingParams


@pytest.mark.parametrize(
    "value, seconds",
    [
        (None, None), (0, 0.0), (300, 300.0), (2.5, 2.5), ("5m", 300.0), ("1h30m", 5400.0), ("500ms", 0.5),
        ("1.5h", 5400.0), ("10", 10.0), ("0", 0.0), (-1, -1.0), ("-1m", -1.0), ("-5", -1.0),
    ],
)  # fmt: skip
def test_keep_alive_accepts_seconds_and_go_durations(value: Any, seconds: float | None) -> None:
    assert parse_keep_alive(value) == seconds


@pytest.mark.parametrize("value", ["soon", "5 m", "m", "", True, [5], "5x"])
def test_keep_alive_refuses_anything_else(value: Any) -> None:
    with pytest.raises(InvalidRequest) as e:
        parse_keep_alive(value)
    assert e.value.param == "keep_alive"


def test_options_default_to_ollamas_sampling() -> None:
    gen = parse_options(None)
    assert gen.sampling == SamplingParams(
        temperature=0.8,
        top_k=40,
        top_p=0.9,
        repeat_penalty=1.1,
        repeat_last_n=64,
        seed=None,
        dry_sequence_breakers=DRY_BREAKERS,  # llama-server's, used when DRY is on
    )
    assert (gen.stop, gen.num_predict, gen.num_ctx, gen.repeat_whole_context) == ((), None, None, False)


def test_options_map_ollama_values() -> None:
    gen = parse_options(
        {"temperature": 0, "top_k": 5, "top_p": 0.5, "min_p": 0.1, "typical_p": 0, "seed": 7, "num_predict": 12,
         "num_ctx": 99999, "stop": "END", "repeat_penalty": 0, "repeat_last_n": -1, "presence_penalty": 0.5,
         "frequency_penalty": 0.25, "num_gpu": 99, "mirostat": 2, "some_future_option": 1},
        logprobs=True, top_logprobs=3,
    )  # fmt: skip
    s = gen.sampling
    assert (s.temperature, s.top_k, s.top_p, s.min_p, s.seed) == (0.0, 5, 0.5, 0.1, 7)
    assert (s.typical_p, s.repeat_penalty) == (1.0, 1.0)  # 0 means "off" to Ollama
    assert (s.presence_penalty, s.frequency_penalty, s.logprobs, s.top_logprobs) == (0.5, 0.25, True, 3)
    assert (gen.stop, gen.num_predict, gen.num_ctx, gen.repeat_whole_context) == (("END",), 12, 99999, True)


@pytest.mark.parametrize("seed, num_predict", [(-1, -1), (-1, -2)])
def test_negative_seed_and_num_predict_mean_random_and_unlimited(seed: int, num_predict: int) -> None:
    gen = parse_options({"seed": seed, "num_predict": num_predict})
    assert gen.sampling.seed is None and gen.num_predict is None


@pytest.mark.parametrize(
    "options, param",
    [
        ({"temperature": "hot"}, "options.temperature"),
        ({"temperature": -1}, "options.temperature"),
        ({"top_p": 2}, "options.top_p"),
        ({"presence_penalty": 5}, "options.presence_penalty"),
        ({"stop": [1]}, "options.stop"),
        ({"num_ctx": 0}, "options.num_ctx"),
        ({"seed": 1.5}, "options.seed"),
    ],
)
def test_bad_options_name_the_field(options: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        parse_options(options)
    assert e.value.param == param and param in e.value.message


def test_chat_body_defaults() -> None:
    req = parse_chat({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    c = req.common
    assert (c.model, c.stream, c.keep_alive, c.grammar, c.think, c.think_level, c.logprobs) == (
        "m", True, None, None, None, None, False,
    )  # fmt: skip
    assert req.messages == [{"role": "user", "content": "hi"}] and req.tools == []


def test_chat_messages_become_template_shapes() -> None:
    req = parse_chat(
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": "weather?", "images": []},
                {"role": "assistant", "content": "", "thinking": "hmm",
                 "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                {"role": "tool", "content": "21C", "tool_name": "get_weather"},
            ],
        }
    )  # fmt: skip
    assert req.messages == [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "", "reasoning_content": "hmm",
         "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "21C", "tool_name": "get_weather", "name": "get_weather"},
    ]  # fmt: skip


def test_tools_need_no_type() -> None:
    tool = {
        "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}
    }
    req = parse_chat({"model": "m", "messages": [], "tools": [tool]})
    assert [t.name for t in req.tools] == ["f"]


@pytest.mark.parametrize(
    "body, param",
    [
        ({"messages": [{"role": "user", "content": "x", "images": ["aGk="]}]}, "messages[0].images"),
        ({"messages": [{"content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
        ({"messages": [{"role": "assistant", "tool_calls": [{"function": {}}]}]}, "messages[0].tool_calls[0].function.name"),
        ({"messages": [], "format": "xml"}, "format"),
        ({"messages": [], "think": "extreme"}, "think"),
        ({"messages": [], "keep_alive": "later"}, "keep_alive"),
        ({"messages": [], "stream": "yes"}, "stream"),
        ({"messages": [], "top_logprobs": 50}, "top_logprobs"),
    ],
)  # fmt: skip
def test_bad_chat_fields_are_named(body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        parse_chat({"model": "m", **body})
    assert e.value.param == param


def test_format_json_schema_and_think_levels() -> None:
    assert parse_chat({"messages": [], "format": ""}).common.grammar is None
    assert parse_chat({"messages": [], "format": "json"}).common.grammar is not None
    schema = {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]}
    assert parse_chat({"messages": [], "format": schema}).common.grammar is not None
    c = parse_chat({"messages": [], "think": "high", "top_logprobs": 2}).common
    assert (c.think, c.think_level, c.logprobs, c.gen.sampling.top_logprobs) == (True, "high", True, 2)
    assert parse_chat({"messages": [], "think": False}).common.think is False


def test_generate_body() -> None:
    req = parse_generate(
        {
            "model": "m",
            "prompt": "p",
            "system": "s",
            "raw": True,
            "context": [1, 2],
            "stream": False,
            "keep_alive": "1m",
        }
    )
    assert (req.prompt, req.system, req.template, req.raw, req.context) == ("p", "s", None, True, [1, 2])
    assert (req.common.stream, req.common.keep_alive) == (False, 60.0)
    empty = parse_generate({"model": "m"})
    assert (empty.prompt, empty.context, empty.raw) == ("", None, False)


@pytest.mark.parametrize(
    "body, param",
    [
        ({"images": ["aGk="]}, "images"),
        ({"suffix": "tail", "context": [1, 2]}, "suffix"),
        ({"suffix": "tail", "template": "{{ .Prompt }}"}, "suffix"),
        ({"context": [1, "2"]}, "context"),
        ({"context": 5}, "context"),
        ({"raw": 1}, "raw"),
    ],
)
def test_bad_generate_fields_are_named(body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        parse_generate({"model": "m", "prompt": "x", **body})
    assert e.value.param == param


def test_model_defaults_go_under_request_options() -> None:
    c = parse_chat({"messages": [], "options": {"temperature": 0.1}, "top_logprobs": 1}).common
    assert c.knobs.under({}) is c.knobs
    d = c.knobs.under({"temperature": 0.7, "top_k": 3, "stop": ["END"], "num_predict": 9})
    s = d.sampling
    assert (s.temperature, s.top_k, s.top_logprobs, d.stop, d.max_tokens) == (0.1, 3, 1, ("END",), 9)


def test_format_keywords_that_cannot_be_enforced_are_refused_when_strict() -> None:
    from llamay.errors import GrammarError

    body = {"model": "m", "messages": [{"role": "user", "content": "x"}],
            "format": {"type": "array", "uniqueItems": True}, "strict": True}  # fmt: skip
    with pytest.raises(GrammarError) as e:
        parse_chat(body)
    assert "uniqueItems" in e.value.message and e.value.param == "format"
    # Without strict the rest is enforced and the keyword is listed for the after-check.
    del body["strict"]
    grammar = parse_chat(body).common.grammar
    assert grammar is not None and grammar.unenforced == ("uniqueItems at /",)

import pytest

from llamay.api.openai.schemas import parse_chat, parse_completion
from llamay.errors import InvalidRequest, Unsupported


def chat(**kw: object) -> dict:
    return {"messages": [{"role": "user", "content": "hi"}], **kw}


def test_defaults() -> None:
    req = parse_chat(chat())
    assert req.common.model == "" and req.common.n == 1 and req.common.max_tokens is None
    assert req.common.sampling.temperature == 1.0 and not req.common.sampling.logprobs


def test_max_completion_tokens_wins() -> None:
    assert parse_chat(chat(max_tokens=5, max_completion_tokens=7)).common.max_tokens == 7


@pytest.mark.parametrize(
    "body, param",
    [
        ({}, "messages"),
        ({"messages": []}, "messages"),
        ({"messages": "hi"}, "messages"),
        ({"messages": [{"content": "x"}]}, "messages[0].role"),
        (chat(temperature="hot"), "temperature"),
        (chat(n=0), "n"),
        (chat(max_tokens=0), "max_tokens"),
        (chat(stop=[1]), "stop"),
        (chat(logit_bias={"abc": 1}), "logit_bias"),
        (chat(top_logprobs=3), "top_logprobs"),
        (chat(stream="yes"), "stream"),
    ],
)
def test_bad_fields_are_named(body: dict, param: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        parse_chat(body)
    assert e.value.param == param


def test_logprobs_map_to_sampling() -> None:
    req = parse_chat(chat(logprobs=True, top_logprobs=3))
    assert req.common.sampling.logprobs and req.common.sampling.top_logprobs == 3


def test_stop_string_or_list() -> None:
    assert parse_chat(chat(stop="END")).common.stop == ("END",)
    assert parse_chat(chat(stop=["a", "", "b"])).common.stop == ("a", "b")


@pytest.mark.parametrize(
    "prompt, expected",
    [("hi", ["hi"]), (["a", "b"], ["a", "b"]), ([1, 2, 3], [[1, 2, 3]]), ([[1], [2, 3]], [[1], [2, 3]])],
)
def test_completion_prompt_shapes(prompt: object, expected: list) -> None:
    assert parse_completion({"prompt": prompt}).prompts == expected


@pytest.mark.parametrize("prompt", [[], [1, "a"], [[]], 5, {"x": 1}])
def test_completion_bad_prompts(prompt: object) -> None:
    with pytest.raises(InvalidRequest) as e:
        parse_completion({"prompt": prompt})
    assert e.value.param == "prompt"


def test_completion_default_max_tokens_is_16() -> None:
    assert parse_completion({"prompt": "x"}).common.max_tokens == 16


def test_completion_max_tokens_may_be_zero_chat_may_not() -> None:
    assert parse_completion({"prompt": "x", "max_tokens": 0}).common.max_tokens == 0
    with pytest.raises(InvalidRequest):
        parse_completion({"prompt": "x", "max_tokens": -1})
    with pytest.raises(InvalidRequest):
        parse_chat(chat(max_completion_tokens=0))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("web_search_options", {"search_context_size": "low"}),
        ("audio", {"voice": "alloy", "format": "mp3"}),
        ("functions", [{"name": "f", "parameters": {"type": "object"}}]),
        ("function_call", "auto"),
        ("modalities", ["text", "audio"]),
    ],
)
def test_chat_fields_that_change_the_meaning_are_refused_by_name(field: str, value: object) -> None:
    base = {"messages": [{"role": "user", "content": "hi"}]}
    with pytest.raises(Unsupported) as e:
        parse_chat({**base, field: value})
    assert e.value.param == field and e.value.status == 400
    assert parse_chat({**base, "modalities": ["text"]}).common.n == 1

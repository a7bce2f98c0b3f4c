"""OpenAI shapes: legacy completion logprobs with a scored echo, chat messages and
logprobs as the spec requires them, and the last chunk of a streamed choice."""

from __future__ import annotations

from llamay.api.openai.adapter import chat_chunk, chat_response, finish_chunk
from llamay.api.openai.completions_render import (
    Echo,
    completion_chunk,
    completion_logprobs_json,
    completion_usage_json,
)
from llamay.types import FinishEvent, PromptLogprob, TokenEvent, TopLogprob, Usage


def test_echo_puts_the_prompt_first_with_a_null_first_entry() -> None:
    scores = (
        PromptLogprob(2, b" caf", -1.5, (TopLogprob(9, b" the", -0.5),)),
        PromptLogprob(3, b"\xc3", -2.0, (TopLogprob(3, b"\xc3", -2.0),)),  # half of "é"
        PromptLogprob(4, b"\xa9!", -0.25, ()),
    )
    echo = Echo("Hi café!", b"Hi", scores)
    gen = [TokenEvent(7, " ok", -0.1, (TopLogprob(8, b" no", -0.05),), b" ok")]
    lp = completion_logprobs_json(gen, len(echo.text), echo)
    assert lp["tokens"] == ["Hi", " caf", "\ufffd", "\ufffd!", " ok"]
    assert lp["token_logprobs"] == [None, -1.5, -2.0, -0.25, -0.1]
    assert lp["top_logprobs"] == [
        None,
        {" the": -0.5, " caf": -1.5},  # the actual token is added when not among the top
        {"\ufffd": -2.0},
        {"\ufffd!": -0.25},
        {" no": -0.05, " ok": -0.1},
    ]
    # Offsets index the echoed text, where the two bytes of "é" make one character.
    assert lp["text_offset"] == [0, 2, 6, 6, 8]
    assert (echo.text + " ok")[8:] == " ok"


def test_without_echo_offsets_start_where_the_text_does() -> None:
    gen = [TokenEvent(7, "a", -0.1, (), b"a"), TokenEvent(8, "bc", -0.2, (), b"bc")]
    lp = completion_logprobs_json(gen, 0)
    assert lp["text_offset"] == [0, 1] and lp["top_logprobs"] == [{"a": -0.1}, {"bc": -0.2}]


def test_usage_counts_each_prompt_once_per_n_choices() -> None:
    usages = [Usage(10, 3, 4), Usage(10, 5, 4), Usage(7, 1, 0), Usage(7, 2, 0)]
    body = completion_usage_json(usages, 2)
    assert body["prompt_tokens"] == 17 and body["completion_tokens"] == 11 and body["total_tokens"] == 28
    assert body["prompt_tokens_details"] == {"cached_tokens": 4}


def test_sampled_token_outside_the_top_k_is_added_to_each_position() -> None:
    # logprobs: 1 with a token sampled below the best one: both are listed, as OpenAI does.
    gen = [TokenEvent(7, " b", -1.2, (TopLogprob(8, b" a", -0.4),), b" b"),
           TokenEvent(8, " a", -0.3, (TopLogprob(8, b" a", -0.3),), b" a")]  # fmt: skip
    assert completion_logprobs_json(gen, 0)["top_logprobs"] == [{" a": -0.4, " b": -1.2}, {" a": -0.3}]


def test_chat_message_and_logprobs_carry_the_required_refusal() -> None:
    ev = TokenEvent(7, "x", -0.5, (), b"x")
    body = chat_response(
        "id",
        "m",
        [("hi", FinishEvent("stop", Usage(3, 1)), [ev]), ("yo", FinishEvent("stop", Usage(3, 1)), None)],
    )
    first, second = body["choices"]
    assert first["message"] == {"role": "assistant", "content": "hi", "refusal": None}
    assert first["logprobs"]["refusal"] is None and [e["token"] for e in first["logprobs"]["content"]] == [
        "x"
    ]
    assert second["logprobs"] is None
    chunk = chat_chunk("id", "m", 0, 0, {"content": "x"}, logprobs=[{"token": "x"}])
    assert chunk["choices"][0]["logprobs"] == {"content": [{"token": "x"}], "refusal": None}
    assert chat_chunk("id", "m", 0, 0, {})["choices"][0]["logprobs"] is None


def test_finish_chunk_says_why_and_counts_its_choice() -> None:
    cut = FinishEvent("length", Usage(10, 4, 2), message="output incomplete: max_tokens")
    last = finish_chunk(chat_chunk("id", "m", 0, 1, {}, finish="length", with_usage_field=True), cut, None)
    assert last["choices"][0]["finish_message"] == "output incomplete: max_tokens"
    assert last["usage"] is None  # as OpenAI specifies: only the trailing usage chunk has one
    assert last["choices"][0]["llamay_usage"] == {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14,
                             "prompt_tokens_details": {"cached_tokens": 2}}  # fmt: skip
    check = {"unenforced": [], "valid": True, "errors": []}
    done = finish_chunk(
        completion_chunk("id", "m", 0, 0, "", finish="stop"), FinishEvent("stop", Usage(5, 1)), check
    )
    assert "finish_message" not in done["choices"][0] and done["choices"][0]["schema_check"] == check
    assert "usage" not in done and done["choices"][0]["llamay_usage"]["total_tokens"] == 6

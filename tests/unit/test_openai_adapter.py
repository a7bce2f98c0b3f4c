"""The OpenAI legacy completion logprobs with a scored echo: pure JSON shaping."""

from __future__ import annotations

from llamay.api.openai.adapter import Echo, completion_logprobs_json, completion_usage_json
from llamay.types import PromptLogprob, TokenEvent, TopLogprob, Usage


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

"""The pure Ollama adapter with golden JSON: chunks, final objects and their timings, tool
calls with object arguments, logprobs, and the reply splitter."""

from __future__ import annotations

from llamay.api.ollama import adapter
from llamay.api.ollama.reply import Reply, Step
from llamay.api.ollama.schemas import Generation, knobs_of
from llamay.chat.flow import ChatSetup, Piece
from llamay.chat.pipeline import run_spec
from llamay.chat.reasoning import ReasoningMarkers
from llamay.chat.tools import HermesFormat, ToolCall, ToolSpec
from llamay.chat.traits import Traits
from llamay.types import FinishEvent, SamplingParams, TokenEvent, TopLogprob, Usage

FIN = FinishEvent(
    "length", Usage(13, 20, 4), extra={"prompt_ms": 12.5, "generate_ms": 90.25, "queue_ms": 1.0}
)
STATS = {"total_duration": 200, "load_duration": 3}
T = "2024-01-01T00:00:00.000000Z"


def test_iso_time_and_nanos() -> None:
    assert adapter.iso_time(0) == "1970-01-01T00:00:00.000000Z"
    assert adapter.iso_time(1700000000.25) == "2023-11-14T22:13:20.250000Z"
    assert (adapter.nanos(1.5), adapter.nanos(-1)) == (1_500_000_000, 0)


def test_stats_are_nanoseconds_and_counts() -> None:
    assert adapter.stats_json(FIN, load_ns=3, total_ns=200) == {
        "total_duration": 200,
        "load_duration": 3,
        "prompt_eval_count": 13,
        "prompt_eval_duration": 12_500_000,
        "eval_count": 20,
        "eval_duration": 90_250_000,
    }


def test_chat_chunk_and_final_golden() -> None:
    assert adapter.chat_chunk("m", T, content="Hi", thinking="hmm") == {
        "model": "m", "created_at": T, "message": {"role": "assistant", "content": "Hi", "thinking": "hmm"},
        "done": False,
    }  # fmt: skip
    calls = [{"id": "call_1", "function": {"index": 0, "name": "f", "arguments": {"a": 1}}}]
    assert adapter.chat_final("m", T, FIN, STATS, tool_calls=calls) == {
        "model": "m", "created_at": T, "message": {"role": "assistant", "content": "", "tool_calls": calls},
        "done": True, "done_reason": "length", "total_duration": 200, "load_duration": 3,
    }  # fmt: skip


def test_generate_chunk_and_final_golden() -> None:
    assert adapter.generate_chunk("m", T, response="x") == {
        "model": "m",
        "created_at": T,
        "response": "x",
        "done": False,
    }
    assert adapter.generate_final("m", T, FIN, STATS, response="xy", thinking="t", context=[1, 2, 3]) == {
        "model": "m", "created_at": T, "response": "xy", "thinking": "t", "done": True, "done_reason": "length",
        "context": [1, 2, 3], "total_duration": 200, "load_duration": 3,
    }  # fmt: skip
    lps = [{"token": "x", "logprob": -0.5, "bytes": [120], "top_logprobs": []}]
    assert adapter.generate_chunk("m", T, logprobs=lps)["logprobs"] == lps


def test_load_replies() -> None:
    assert adapter.load_reply("m", T, chat=True, reason="load") == {
        "model": "m", "created_at": T, "message": {"role": "assistant", "content": ""}, "done": True,
        "done_reason": "load",
    }  # fmt: skip
    assert adapter.load_reply("m", T, chat=False, reason="unload") == {
        "model": "m", "created_at": T, "response": "", "done": True, "done_reason": "unload",
    }  # fmt: skip


def test_done_reason_tool_calls_is_stop() -> None:
    assert adapter.done_reason(FinishEvent("tool_calls", Usage(1, 1))) == "stop"
    assert adapter.done_reason(FinishEvent("stop", Usage(1, 1))) == "stop"
    assert adapter.done_reason(FinishEvent("error", Usage(1, 1))) == "error"


def test_tool_call_arguments_are_objects() -> None:
    calls = [
        ToolCall("call_a", "get_weather", '{"city": "Paris", "unit": "c"}'),
        ToolCall("call_b", "cut_off", '{"city": "Par'),
        ToolCall("call_c", "encoded", '"{\\"x\\": 1}"'),
        ToolCall("call_d", "no_args", ""),
        ToolCall("call_e", "not_object", "[1]"),
    ]
    assert adapter.tool_calls_json(calls, first_index=2) == [
        {"id": "call_a", "function": {"index": 2, "name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}},
        {"id": "call_c", "function": {"index": 4, "name": "encoded", "arguments": {"x": 1}}},
        {"id": "call_d", "function": {"index": 5, "name": "no_args", "arguments": {}}},
    ]  # fmt: skip


def test_logprob_json_floors_minus_infinity() -> None:
    ev = TokenEvent(
        5,
        "é",
        -0.25,
        (TopLogprob(5, "é".encode(), -0.25), TopLogprob(6, b"\xff", float("-inf"))),
        "é".encode(),
    )
    assert adapter.logprob_json(ev) == {
        "token": "é", "logprob": -0.25, "bytes": [195, 169],
        "top_logprobs": [{"token": "é", "logprob": -0.25, "bytes": [195, 169]},
                         {"token": "\ufffd", "logprob": -9999.0, "bytes": [255]}],
    }  # fmt: skip


def test_run_spec_and_whole_context_repeat() -> None:
    gen = Generation(SamplingParams(temperature=0.0, repeat_last_n=0), ("END",), 500, None, True)
    spec = run_spec(knobs_of(gen), 100, default_max=50)
    assert (spec.max_tokens, spec.stop, spec.default_max, spec.n) == (500, ("END",), 50, 1)
    assert spec.sampling.repeat_last_n == 100
    free = run_spec(knobs_of(Generation(num_predict=None)), 100, default_max=50)
    assert (free.max_tokens, free.sampling.repeat_last_n) == (None, 64)


class _Fed:
    """A Reply fed by the pipeline's splitter, as the routes feed it."""

    def __init__(self, setup: ChatSetup, *, show_thinking: bool = True) -> None:
        self.out = setup.output()
        self.reply = Reply(show_thinking=show_thinking)

    def push(self, text: str) -> Step:
        return self.reply.step(self.out.push(text), self.out.calls, final=False)

    def finish(self) -> Step:
        return self.reply.step(self.out.finish(), self.out.calls, final=True)


def test_plain_reply_is_all_content() -> None:
    reply = Reply()
    assert reply.step([Piece("content", "<think>a")], [], final=False).content == "<think>a"
    assert not reply.step([], [], final=True)
    assert (reply.content, reply.thinking, reply.tool_calls) == ("<think>a", "", [])


def _setup(started: bool = False) -> ChatSetup:
    traits = Traits(HermesFormat(), ReasoningMarkers())
    return ChatSetup([], "", None, traits, [ToolSpec("f"), ToolSpec("g")], None, started)


def test_reply_splits_thinking_content_and_whole_calls() -> None:
    text = (
        '<think>plan</think>Sure. <tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'
        '<tool_call>\n{"name": "g", "arguments": {"b": [2]}}\n</tool_call>'
    )
    fed = _Fed(_setup())
    fed.push(text)
    fed.finish()
    whole = fed.reply
    assert (whole.thinking, whole.content.strip()) == ("plan", "Sure.")
    assert [(c["function"]["name"], c["function"]["arguments"], c["function"]["index"]) for c in whole.tool_calls] == [
        ("f", {"a": 1}, 0), ("g", {"b": [2]}, 1),
    ]  # fmt: skip
    feed = _Fed(_setup())
    steps = [feed.push(ch) for ch in text] + [feed.finish()]
    streamed = feed.reply
    reported = [
        (i, [c["function"]["name"] for c in s.tool_calls]) for i, s in enumerate(steps) if s.tool_calls
    ]
    assert [names for _, names in reported] == [["f"], ["g"]]  # each call once, whole
    assert reported[0][0] < len(text) and reported[1][0] == len(text)  # f as soon as g starts; g at the end
    assert (streamed.thinking, streamed.content) == (whole.thinking, whole.content)
    assert [c["function"] for c in streamed.tool_calls] == [c["function"] for c in whole.tool_calls]
    assert all(c["id"].startswith("call_") for c in streamed.tool_calls)  # ids are fresh per reply


def test_reply_hides_thinking_when_think_is_false() -> None:
    fed = _Fed(_setup(started=True), show_thinking=False)
    step = fed.push("hidden</think>shown")
    fed.finish()
    reply = fed.reply
    assert step.thinking == "" and reply.thinking == "" and reply.content == "shown"

"""The tool loop and output parsing of one chat call, over a scripted backend that
records what each round was asked (the real engine's tests are tests/model/test_library*)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel

import llamay
from llamay.library.backend import Reply
from llamay.library.errors import OutputError
from llamay.library.options import Ask, options
from llamay.library.results import ChatResult, Chunk, ToolCall, Usage
from llamay.library.turns import collect_chat, run_chat


class Scripted:
    """Answers round i with replies[i] (the last one repeats), recording every Ask."""

    name = "scripted"

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.asks: list[Ask] = []

    async def generate(self, ask: Ask) -> AsyncIterator[Chunk | Reply]:
        self.asks.append(ask)
        reply = self.replies[min(len(self.asks) - 1, len(self.replies) - 1)]
        if reply.content:
            yield Chunk(reply.content)
        yield reply


def call(name: str, **args: Any) -> Reply:
    return Reply("", calls=[ToolCall(f"call_{name}", name, args)], raw_arguments=[json.dumps(args)],
                 finish_reason="tool_calls", usage=Usage(10, 5, 2))  # fmt: skip


def text(content: str, reason: str = "stop") -> Reply:
    return Reply(content, finish_reason=reason, usage=Usage(20, 3, 0))


counter = {"n": 0}


@llamay.tool
def bump(by: int) -> dict[str, int]:
    """Add to the counter."""
    counter["n"] += by
    return {"n": counter["n"]}


@llamay.tool
async def fail(why: str) -> str:
    """Always fails."""
    raise RuntimeError(why)


def chat(backend: Scripted, **kw: Any) -> ChatResult:
    return asyncio.run(collect_chat(backend, [{"role": "user", "content": "go"}], options(**kw)))  # type: ignore[arg-type]


def test_calls_run_results_go_back_and_the_model_answers() -> None:
    counter["n"] = 0
    backend = Scripted(call("bump", by=2), text("done"))
    result = chat(backend, tools=[bump], run_tools=True)
    assert result.text == "done" and counter["n"] == 2
    assert [c.result for c in result.tool_calls] == [{"n": 2}] and result.tool_calls[0].ran
    assert result.usage == Usage(30, 8, 2)  # both rounds
    second = backend.asks[1].messages
    assert second[1]["tool_calls"][0]["function"] == {"name": "bump", "arguments": '{"by": 2}'}
    assert second[2] == {"role": "tool", "tool_call_id": "call_bump", "name": "bump", "content": '{"n": 2}'}
    assert result.messages[-1] == {"role": "assistant", "content": "done"}


def test_the_loop_is_bounded_then_answers_in_text() -> None:
    counter["n"] = 0
    backend = Scripted(call("bump", by=1), call("bump", by=1), text("enough"))
    result = chat(backend, tools=[bump], run_tools=True, max_tool_rounds=2)
    assert counter["n"] == 2 and result.text == "enough"
    assert [bool(a.tools) for a in backend.asks] == [True, True, False]
    assert backend.asks[2].tool_choice == "none"


def test_a_forced_choice_only_binds_the_first_round() -> None:
    backend = Scripted(call("bump", by=1), text("ok"))
    chat(backend, tools=[bump], run_tools=True, tool_choice="bump")
    assert [a.tool_choice for a in backend.asks] == ["bump", "auto"]


def test_without_run_tools_calls_are_returned() -> None:
    counter["n"] = 0
    result = chat(Scripted(call("bump", by=5)), tools=[bump])
    assert counter["n"] == 0 and result.finish_reason == "tool_calls"
    assert result.tool_calls == [ToolCall("call_bump", "bump", {"by": 5})]
    assert result.messages[-1]["tool_calls"][0]["id"] == "call_bump"


def test_a_call_cut_short_is_not_run() -> None:
    counter["n"] = 0
    cut = Reply("", calls=[ToolCall("c", "bump", {})], raw_arguments=["{"], finish_reason="length")
    result = chat(Scripted(cut), tools=[bump], run_tools=True)
    assert counter["n"] == 0 and result.finish_reason == "length" and not result.tool_calls[0].ran


def test_a_failing_tool_reports_the_error_to_the_model() -> None:
    backend = Scripted(call("fail", why="no network"), text("sorry"))
    result = chat(backend, tools=[fail], run_tools=True)
    assert result.tool_calls[0].result == {"error": "RuntimeError: no network"}
    assert "no network" in backend.asks[1].messages[-1]["content"]


class Answer(BaseModel):
    value: int


def test_output_is_parsed_and_a_text_answer_in_a_tool_round_is_redone_under_the_schema() -> None:
    backend = Scripted(text("free words"), text('{"value": 4}'))
    result = chat(backend, tools=[bump], run_tools=True, output=Answer)
    assert result.parsed == Answer(value=4)
    assert backend.asks[0].output is None and backend.asks[0].tools
    assert backend.asks[1].output is not None and not backend.asks[1].tools


def test_an_answer_that_does_not_parse_is_an_output_error() -> None:
    with pytest.raises(OutputError) as err:
        chat(Scripted(text('{"value": ', reason="length")), output=Answer)
    assert isinstance(err.value, llamay.LlamayError)
    assert err.value.text == '{"value": ' and err.value.result.finish_reason == "length"
    assert "before the value was complete" in err.value.message


def test_streamed_chunks_come_in_order_with_calls_and_results() -> None:
    counter["n"] = 0
    backend = Scripted(call("bump", by=3), text("three"))

    async def run() -> list[Chunk | ChatResult]:
        opts = options(tools=[bump], run_tools=True)
        return [x async for x in run_chat(backend, [{"role": "user", "content": "go"}], opts)]

    items = asyncio.run(run())
    kinds = [x.kind if isinstance(x, Chunk) else "result" for x in items]
    assert kinds == ["tool_call", "tool_result", "content", "result"]
    assert items[1].call is not None and items[1].call.result == {"n": 3}  # type: ignore[union-attr]

"""One chat call, whatever the backend: rounds of generation, the tool loop between
them, and the answer parsed into the output type."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from .backend import Backend, Reply
from .errors import OutputError
from .options import Ask, Options
from .results import ChatResult, Chunk, Timings, ToolCall, Usage
from .tools import Tool, result_text

__all__ = ["run_chat", "collect_chat", "result_of"]


async def run_chat(
    backend: Backend, messages: list[dict[str, Any]], opts: Options, session: Any = None
) -> AsyncIterator[Chunk | ChatResult]:
    """Stream a chat call: content and reasoning chunks as they come, a "tool_call" chunk
    per call the model makes and a "tool_result" chunk once it ran, then the ChatResult.

    With tools and `run_tools`, a round whose reply calls tools runs them (concurrently),
    appends the assistant turn and one `tool` message per call, and asks again, at most
    `max_tool_rounds` times; the round after that offers no tools, so the model answers
    in text. A round with tools cannot also be held to the output schema (a reply is
    either calls or an answer), so when `output=` is set and a tool round answers in
    text, that answer is generated again under the schema, with no tools offered.
    """
    history = list(messages)
    usage, timings = Usage(), Timings()
    calls: list[ToolCall] = []
    rounds = 0
    final = False  # this round must answer in text
    while True:
        offer = (
            bool(opts.tools)
            and opts.tool_choice != "none"
            and not final
            and (not opts.run_tools or rounds < opts.max_tool_rounds)
        )
        # A forced choice applies to the first round only, or the loop could never end.
        choice = opts.tool_choice if rounds == 0 else "auto"
        ask = Ask(
            list(history),
            opts,
            tools=opts.specs if offer else [],
            tool_choice=choice if offer else "none",
            output=None if offer else opts.output,
            session=session,
        )
        reply: Reply | None = None
        async for item in backend.generate(ask):
            if isinstance(item, Reply):
                reply = item
            else:
                yield item
        assert reply is not None
        usage, timings = usage + reply.usage, timings + reply.timings
        if reply.calls:
            history.append(_assistant_calls(reply))
            for call in reply.calls:
                yield Chunk(kind="tool_call", call=call)
            if not opts.run_tools or reply.finish_reason == "length":
                # Calls are returned, not run (a call cut short has no complete arguments).
                calls += reply.calls
                break
            done = await _run_calls(opts.runnable(), reply.calls)
            for call in done:
                yield Chunk(kind="tool_result", call=call)
                history.append(
                    {
                        "role": "tool",
                        "tool_call_id": call.id,
                        "name": call.name,
                        "content": result_text(call.result),
                    }
                )
            calls += done
            rounds += 1
            continue
        if offer and opts.output is not None:
            final = True  # answered in text: once more, under the schema
            continue
        history.append(_assistant_text(reply))
        break
    yield result_of(reply, opts, usage, timings, calls, history)


def result_of(
    reply: Reply,
    opts: Options,
    usage: Usage,
    timings: Timings,
    calls: list[ToolCall],
    history: list[dict[str, Any]],
) -> ChatResult:
    """The ChatResult of a finished call; OutputError when `output=` was asked and the
    answer does not parse into it."""
    result = ChatResult(
        text=reply.content,
        reasoning=reply.reasoning,
        tool_calls=calls,
        finish_reason=reply.finish_reason,
        usage=usage,
        timings=timings,
        messages=history,
        finish_message=reply.finish_message,
    )
    if opts.output is None or reply.calls:
        return result
    try:
        parsed = opts.output.parse(reply.content)
    except ValueError as exc:
        why = (
            "generation stopped before the value was complete"
            if reply.finish_reason == "length"
            else str(exc)
        )
        raise OutputError(
            f"the answer is not a valid {opts.output.name}: {why}", text=reply.content, result=result
        ) from None
    return replace(result, parsed=parsed)


async def collect_chat(
    backend: Backend, messages: list[dict[str, Any]], opts: Options, session: Any = None
) -> ChatResult:
    """`run_chat` to its end."""
    result: ChatResult | None = None
    async for item in run_chat(backend, messages, opts, session):
        if isinstance(item, ChatResult):
            result = item
    assert result is not None
    return result


async def _run_calls(tools: dict[str, Tool], calls: list[ToolCall]) -> list[ToolCall]:
    """Run every call at once; a function that raises (or arguments it refuses) gives the
    model `{"error": "..."}` as its result, so it can recover in the next round."""

    async def one(call: ToolCall) -> ToolCall:
        fn = tools.get(call.name)
        try:
            if fn is None:
                raise LookupError(f"no tool named {call.name!r}")
            value = await fn.invoke(call.arguments)
        except Exception as exc:  # the model sees the failure; the loop goes on
            value = {"error": f"{type(exc).__name__}: {exc}"}
        return replace(call, result=value, ran=True)

    return list(await asyncio.gather(*(one(c) for c in calls)))


def _assistant_calls(reply: Reply) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": reply.content or None,
        "tool_calls": [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": raw or json.dumps(c.arguments)},
            }
            for c, raw in zip(reply.calls, reply.raw_arguments or [""] * len(reply.calls), strict=True)
        ],
    }


def _assistant_text(reply: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning
    return message

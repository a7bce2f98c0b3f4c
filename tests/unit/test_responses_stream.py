"""The Responses event stream around a generation that fails midway, or is left early: one
`error` event ends it, and the generation is closed either way (which frees its KV)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any, cast

import pydantic
from openai.types.responses import ResponseStreamEvent

from llamay.api.openai.responses import Turn
from llamay.api.openai.responses_render import ResponseBuilder, ResponseRenderer, base_json
from llamay.api.openai.responses_schema import parse_responses
from llamay.chat.flow import Piece
from llamay.chat.pipeline import Delta, Frames
from llamay.errors import EngineError

EVENT = pydantic.TypeAdapter(ResponseStreamEvent)


class FailingGeneration:
    """Two tokens of content, then the engine's failure."""

    def __init__(self) -> None:
        self.closed = 0

    def __aiter__(self) -> AsyncIterator[Delta]:
        return self._steps()

    async def _steps(self) -> AsyncIterator[Delta]:
        yield Delta(0, [Piece("content", "Hel")])
        yield Delta(0, [Piece("content", "lo")])
        raise EngineError("the engine stopped")

    def close(self) -> None:
        self.closed += 1


def turn(gen: FailingGeneration) -> Turn:
    req = parse_responses({"model": "m", "input": "hi"})
    request = SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(responses=None)))
    builder = ResponseBuilder(base_json("resp_x", "m", req), summary=False)
    return Turn(cast(Any, request), req, cast(Any, None), builder, [], gen=cast(Any, gen))


def stream_of(gen: FailingGeneration) -> Frames[bytes]:
    """The turn's event stream, as the route builds it."""
    t = turn(gen)
    return Frames(cast(Any, gen), ResponseRenderer(t.builder, streaming=True), cleanup=t.abandon)


def events_of(frames: list[bytes]) -> list[dict[str, Any]]:
    out = []
    for frame in frames:
        kind, data = frame.decode().strip().split("\n")
        event = json.loads(data.removeprefix("data: "))
        assert kind == f"event: {event['type']}"
        out.append(event)
    return out


def test_a_failure_midway_is_one_error_event_and_closes_the_generation() -> None:
    gen = FailingGeneration()

    async def run() -> list[bytes]:
        stream = stream_of(gen)
        frames = [frame async for frame in stream]
        await stream.aclose()
        return frames

    events = events_of(asyncio.run(run()))
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    for e in events:
        EVENT.validate_python(e)
    assert events[-1]["type"] == "error" and events[-1]["message"] == "the engine stopped"
    assert [e["type"] for e in events].count("response.output_text.delta") == 2
    assert gen.closed >= 1


def test_a_stream_closed_before_its_first_frame_closes_the_generation() -> None:
    gen = FailingGeneration()
    asyncio.run(stream_of(gen).aclose())
    assert gen.closed == 1

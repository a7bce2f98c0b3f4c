"""The driver between a generation and an API's renderer (chat/pipeline.py), against a fake
generation: a failure after the stream began is one error frame in that API's own shape
(an unexpected exception too, as an internal error), a whole answer raises it instead,
and the generation is closed exactly once however the stream ends."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest

from llamay.api.anthropic.adapter import MessageRenderer
from llamay.api.ollama.reply import OllamaRenderer
from llamay.api.openai.adapter import ChatRenderer
from llamay.api.openai.responses_render import ResponseBuilder, ResponseRenderer, base_json
from llamay.api.openai.responses_schema import parse_responses
from llamay.chat.flow import Piece
from llamay.chat.pipeline import Delta, Frames, answer
from llamay.errors import EngineError, LlamayError


class Failing:
    """One choice: two tokens of content, then `failure` raised."""

    def __init__(self, failure: Exception) -> None:
        self.failure = failure
        self.streams = [object()]
        self.closed = 0

    def __aiter__(self) -> AsyncIterator[Delta]:
        return self._steps()

    async def _steps(self) -> AsyncIterator[Delta]:
        yield Delta(0, [Piece("content", "Hel")])
        yield Delta(0, [Piece("content", "lo")])
        raise self.failure

    def calls(self, index: int) -> list[Any]:
        return []

    def close(self) -> None:
        self.closed += 1


def renderers(streaming: bool) -> dict[str, Any]:
    req = parse_responses({"model": "m", "input": "hi"})
    return {
        "openai": ChatRenderer("chatcmpl-x", "m", streaming=streaming, include_usage=False, logprobs=False),
        "anthropic": MessageRenderer(
            "msg_x", "m", streaming=streaming, stops=(), shown=True, mark=0, prompt_tokens=3
        ),
        "ollama": OllamaRenderer(
            "m", chat=True, streaming=streaming, thinking=True, logprobs=False, t0=0.0, load_ns=0
        ),
        "responses": ResponseRenderer(
            ResponseBuilder(base_json("resp_x", "m", req), summary=False), streaming=streaming
        ),
    }


def last_body(api: str, frame: bytes) -> dict[str, Any]:
    text = frame.decode()
    if api == "ollama":
        return cast(dict[str, Any], json.loads(text))
    data = next(line for line in text.strip().split("\n") if line.startswith("data: "))
    return cast(dict[str, Any], json.loads(data.removeprefix("data: ")))


def stream(gen: Failing, renderer: Any) -> list[bytes]:
    async def run() -> list[bytes]:
        frames = Frames(cast(Any, gen), renderer)
        try:
            return [f async for f in frames]
        finally:
            await frames.aclose()

    return asyncio.run(run())


EXPECTED = {
    "openai": lambda msg, code: {
        "error": {"message": msg, "type": "server_error", "param": None, "code": code}
    },
    "anthropic": lambda msg, code: {"type": "error", "error": {"type": "api_error", "message": msg}},
    "ollama": lambda msg, code: {"error": msg},
}


@pytest.mark.parametrize("api", ["openai", "anthropic", "ollama"])
@pytest.mark.parametrize(
    ("failure", "message", "code"),
    [
        (EngineError("the engine stopped"), "the engine stopped", "engine_error"),
        (KeyError("secret detail"), "internal error: KeyError", "internal_error"),
    ],
)
def test_a_failure_midway_is_one_error_frame_in_the_apis_shape(
    api: str, failure: Exception, message: str, code: str
) -> None:
    gen = Failing(failure)
    frames = stream(gen, renderers(True)[api])
    assert last_body(api, frames[-1]) == EXPECTED[api](message, code)
    assert b"secret detail" not in b"".join(frames)
    assert sum(b"Hel" in f for f in frames) == 1 and sum(b"lo" in f for f in frames) >= 1
    assert gen.closed == 1


def test_the_responses_error_event_says_what_failed() -> None:
    gen = Failing(KeyError("secret detail"))
    frames = stream(gen, renderers(True)["responses"])
    event = last_body("responses", frames[-1])
    assert (event["type"], event["message"], event["code"]) == (
        "error",
        "internal error: KeyError",
        "internal_error",
    )
    assert gen.closed == 1


@pytest.mark.parametrize("api", ["openai", "anthropic", "ollama", "responses"])
def test_a_stream_closed_before_its_first_frame_closes_the_generation(api: str) -> None:
    gen = Failing(EngineError("never reached"))
    cleaned: list[bool] = []

    async def run() -> None:
        await Frames(cast(Any, gen), renderers(True)[api], cleanup=lambda: cleaned.append(True)).aclose()

    asyncio.run(run())
    assert gen.closed == 1 and cleaned == [True]


@pytest.mark.parametrize("api", ["openai", "anthropic", "ollama", "responses"])
def test_a_whole_answer_raises_the_failure_and_closes_the_generation(api: str) -> None:
    gen = Failing(EngineError("the engine stopped"))
    with pytest.raises(LlamayError, match="the engine stopped"):
        asyncio.run(answer(cast(Any, gen), renderers(False)[api]))
    assert gen.closed == 1

"""Each API's renderer over the same pipeline steps (two tokens of content, then the end),
streamed and whole, against golden JSON: the renderers are pure, so the steps are built
by hand here."""

from __future__ import annotations

import json
from typing import Any, cast

from llamay.api.anthropic.adapter import MessageRenderer
from llamay.api.ollama.reply import OllamaRenderer
from llamay.api.openai.adapter import ChatRenderer
from llamay.api.openai.completions_render import CompletionRenderer, Echo
from llamay.chat.flow import Piece
from llamay.chat.pipeline import Choice, Delta, Done
from llamay.types import FinishEvent, TokenEvent, Usage

TOKENS = [TokenEvent(7, "Hel", token_bytes=b"Hel"), TokenEvent(8, "lo", token_bytes=b"lo")]
FINISH = FinishEvent("stop", Usage(5, 2, 3))
CHOICE = Choice(0, "Hello", "Hello", "", [], FINISH)


class OneChoice:
    """What a renderer reads of a generation: its choices, and the calls parsed so far."""

    streams = [object()]

    def calls(self, index: int) -> list[Any]:
        return []


def steps() -> list[Delta | Done]:
    return [Delta(0, [Piece("content", t.text)], t) for t in TOKENS] + [Done(CHOICE, [])]


def run(renderer: Any) -> list[Any]:
    frames = list(renderer.start(cast(Any, OneChoice())))
    for step in steps():
        frames += renderer.delta(step) if isinstance(step, Delta) else renderer.done(step)
    return frames


def data(frames: list[bytes]) -> list[Any]:
    out = []
    for frame in frames:
        line = next(x for x in frame.decode().split("\n") if x.startswith("data: "))
        payload = line.removeprefix("data: ")
        out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def test_openai_chat_streamed() -> None:
    r = ChatRenderer("chatcmpl-x", "m", streaming=True, include_usage=True, logprobs=False)
    r.created = 1
    head = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": "m"}

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {**head, "choices": [{**choice, **extra}], "usage": None}

    usage = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7,
             "prompt_tokens_details": {"cached_tokens": 3}}  # fmt: skip
    assert data(run(r)) == [
        chunk({"role": "assistant", "content": "", "refusal": None}),
        chunk({"content": "Hel"}),
        chunk({"content": "lo"}),
        chunk({}, "stop", llamay_usage=usage),
        {**head, "choices": [], "usage": usage},
        "[DONE]",
    ]


def test_openai_chat_whole() -> None:
    frames = run(ChatRenderer("chatcmpl-x", "m", streaming=False, include_usage=False, logprobs=False))
    assert len(frames) == 1
    body = frames[0]
    assert (body["id"], body["object"], body["model"]) == ("chatcmpl-x", "chat.completion", "m")
    assert body["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Hello", "refusal": None},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ]
    assert body["usage"]["total_tokens"] == 7


def test_openai_completion_whole_with_its_echo() -> None:
    r = CompletionRenderer(
        "cmpl-x",
        "m",
        streaming=False,
        include_usage=False,
        logprobs=False,
        n=1,
        echoes=[Echo("Say: ")],
        score=False,
    )
    (body,) = run(r)
    assert body["choices"][0]["text"] == "Say: Hello"
    assert body["usage"] == {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7,
                             "prompt_tokens_details": {"cached_tokens": 3}}  # fmt: skip


def test_anthropic_message_streamed_and_whole_hold_the_same_blocks() -> None:
    def renderer(streaming: bool) -> MessageRenderer:
        return MessageRenderer(
            "msg_x", "m", streaming=streaming, stops=(), shown=True, mark=0, prompt_tokens=5
        )

    events = data(run(renderer(True)))
    assert [e["type"] for e in events] == [
        "message_start", "ping", "content_block_start", "content_block_delta", "content_block_delta",
        "content_block_stop", "message_delta", "message_stop",
    ]  # fmt: skip
    assert "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta") == "Hello"
    assert events[-2]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    (body,) = run(renderer(False))
    assert body["content"] == [{"type": "text", "text": "Hello"}]
    assert (body["stop_reason"], body["usage"]["cache_read_input_tokens"]) == ("end_turn", 3)


def test_ollama_generate_streamed_and_whole() -> None:
    def renderer(streaming: bool) -> OllamaRenderer:
        return OllamaRenderer(
            "m",
            chat=False,
            streaming=streaming,
            thinking=True,
            logprobs=False,
            t0=0.0,
            load_ns=0,
            context=[1, 2],
        )

    lines = [json.loads(f) for f in run(renderer(True))]
    assert [x["response"] for x in lines] == ["Hel", "lo", ""]
    assert [x["done"] for x in lines] == [False, False, True]
    assert lines[-1]["context"] == [1, 2, 7, 8] and lines[-1]["eval_count"] == 2
    (body,) = run(renderer(False))
    assert (body["response"], body["done"], body["done_reason"]) == ("Hello", True, "stop")

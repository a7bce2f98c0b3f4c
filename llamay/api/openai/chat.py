"""POST /v1/chat/completions: parse -> the chat pipeline -> OpenAI's shapes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ...chat.defaults import sampling_defaults
from ...chat.flow import Piece, with_finish_default
from ...chat.pipeline import Choice, Delta, Done, Generation, RunSpec, chat_prompt, start
from ...errors import LlamayError
from ...runtime import Runtime
from ...types import Usage
from ..errors import openai_error_body
from ..http import json_response, read_json, sse_frame, sse_response, until_disconnect
from ..sessions import held_context
from ..state import state_of
from . import adapter
from .schemas import ChatRequest, Common, parse_chat, with_defaults

__all__ = ["chat_completions", "run_spec", "stream_frames"]


def run_spec(
    common: Common, runtime: Runtime, *, keep_tokens: bool, prompt_logprobs: int | None = None
) -> RunSpec:
    """The pipeline's RunSpec for an OpenAI request's common fields."""
    return RunSpec(
        sampling=common.sampling,
        max_tokens=common.max_tokens,
        stop=common.stop,
        n=common.n,
        repetition=common.repetition,
        cache_prompt=common.cache_prompt,
        keep_tokens=keep_tokens,
        prompt_logprobs=prompt_logprobs,
        default_max=runtime.config.max_tokens,
    )


async def chat_completions(request: Request) -> Response:
    runtime: Runtime = state_of(request).runtime
    # Parsing compiles schemas and tool specs: CPU work, off the event loop.
    req = await asyncio.to_thread(parse_chat, await read_json(request))
    lm = await runtime.use(req.common.model)
    # The model's and the server's sampling defaults, under what the request set.
    req = replace(req, common=with_defaults(req.common, await sampling_defaults(runtime, lm)))
    req.common.sampling.validate(lm.model.n_vocab)  # logit_bias ids must be in this vocabulary
    # Rendering and tokenizing a large conversation is CPU work: off the event loop.
    prompt = await asyncio.to_thread(
        chat_prompt, lm, with_finish_default(req.options, runtime.config.finish_tool)
    )
    spec = run_spec(req.common, runtime, keep_tokens=req.logprobs)
    async with held_context(request, lm, req.common.session) as held:
        gen = await start(lm, prompt, spec, held=held)
    rid = adapter.new_id("chatcmpl")
    if req.common.stream:
        return sse_response(_frames(rid, lm.name, req, gen))
    choices = await until_disconnect(request, gen.collect())
    body = adapter.chat_response(rid, lm.name, [(c.text, c.finish, c.tokens) for c in choices])
    for out, choice in zip(body["choices"], choices, strict=True):
        _fill_message(out, choice)
    return json_response(body)


def _fill_message(out: dict[str, Any], choice: Choice) -> None:
    message = adapter.chat_message(choice.content)
    if choice.reasoning:
        message["reasoning_content"] = choice.reasoning
    if choice.calls:
        message["content"] = choice.content or None
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in choice.calls
        ]
        if choice.reason == "stop":
            out["finish_reason"] = "tool_calls"
    out["message"] = message
    # A schema not enforced in full: say so, and whether the answer satisfies it.
    if choice.check is not None:
        out["schema_check"] = choice.check


def _delta(piece: Piece) -> dict[str, Any]:
    if piece.kind == "reasoning":
        return {"reasoning_content": piece.text}
    if piece.kind == "content":
        return {"content": piece.text}
    if piece.kind == "call":
        call = {"index": piece.index, "id": piece.id, "type": "function",
                "function": {"name": piece.name, "arguments": ""}}  # fmt: skip
        return {"tool_calls": [call]}
    return {"tool_calls": [{"index": piece.index, "function": {"arguments": piece.text}}]}


async def stream_frames(
    gen: Generation,
    first: list[dict[str, Any]],
    frames_of: Callable[[Delta | Done], list[dict[str, Any]]],
    usage: Callable[[list[Usage]], dict[str, Any]] | None,
) -> AsyncIterator[bytes]:
    """An OpenAI event stream: the `first` chunks, each step's chunks, the usage chunk (if
    asked) and [DONE]; an error mid-stream is one error event, and leaving early (or
    failing) closes the generation, which frees its KV."""
    usages: list[Usage] = []
    try:
        for frame in first:
            yield sse_frame(frame)
        async for step in gen:
            if isinstance(step, Done):
                usages.append(step.choice.usage)
            for frame in frames_of(step):
                yield sse_frame(frame)
    except LlamayError as exc:
        yield sse_frame(openai_error_body(exc))
        return
    finally:
        gen.close()
    if usage is not None:
        yield sse_frame(usage(usages))
    yield sse_frame("[DONE]")


def _frames(rid: str, model: str, req: ChatRequest, gen: Generation) -> AsyncIterator[bytes]:
    created = int(time.time())
    usage_on = req.common.include_usage

    def chunk(i: int, delta: dict[str, Any], **kw: Any) -> dict[str, Any]:
        return adapter.chat_chunk(rid, model, created, i, delta, with_usage_field=usage_on, **kw)

    def frames_of(step: Delta | Done) -> list[dict[str, Any]]:
        if isinstance(step, Delta):
            out = []
            pieces = step.pieces
            if req.logprobs and step.token is not None:
                said = "".join(p.text for p in pieces if p.kind == "content")
                out.append(
                    chunk(step.index, {"content": said}, logprobs=[adapter.chat_logprob_json(step.token)])
                )
                pieces = [p for p in pieces if p.kind != "content"]
            return out + [chunk(step.index, _delta(p)) for p in pieces]
        c = step.choice
        reason = adapter.finish_reason(c.finish)
        if c.calls and c.reason == "stop":
            reason = "tool_calls"
        last = adapter.finish_chunk(chunk(c.index, {}, finish=reason), c.finish, c.check)
        return [chunk(c.index, _delta(p)) for p in step.pieces] + [last]

    first = [chunk(i, {"role": "assistant", "content": "", "refusal": None}) for i in range(len(gen.streams))]
    usage = None
    if usage_on:
        usage = lambda us: adapter.usage_chunk(rid, model, created, "chat.completion.chunk", us)  # noqa: E731
    return stream_frames(gen, first, frames_of, usage)

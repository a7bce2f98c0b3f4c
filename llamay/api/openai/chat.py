"""POST /v1/chat/completions: parse -> the chat pipeline -> OpenAI's shapes."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ...chat.defaults import sampling_defaults
from ...chat.flow import Piece
from ...chat.pipeline import Choice, Delta, Generation, RunSpec, chat_prompt, start
from ...errors import LlamayError
from ...runtime import Runtime
from ..errors import openai_error_body
from ..http import json_response, read_json, sse_frame, sse_response, until_disconnect
from ..sessions import held_context
from . import adapter
from .schemas import ChatRequest, Common, parse_chat, with_defaults

__all__ = ["chat_completions", "run_spec"]


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
    runtime: Runtime = request.app.state.runtime
    req = parse_chat(await read_json(request))
    lm = await runtime.use(req.common.model)
    # The model's and the server's sampling defaults, under what the request set.
    req = replace(req, common=with_defaults(req.common, await sampling_defaults(runtime, lm)))
    req.common.sampling.validate(lm.model.n_vocab)  # logit_bias ids must be in this vocabulary
    prompt = chat_prompt(lm, req.options)
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
    message: dict[str, Any] = {"role": "assistant", "content": choice.content}
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


async def _frames(rid: str, model: str, req: ChatRequest, gen: Generation) -> AsyncIterator[bytes]:
    created = int(time.time())
    usage_on = req.common.include_usage
    usages = []

    def chunk(i: int, delta: dict[str, Any], **kw: Any) -> dict[str, Any]:
        return adapter.chat_chunk(rid, model, created, i, delta, with_usage_field=usage_on, **kw)

    for i in range(len(gen.streams)):
        yield sse_frame(chunk(i, {"role": "assistant", "content": ""}))
    try:
        async for step in gen:
            if isinstance(step, Delta):
                pieces = step.pieces
                if req.logprobs and step.token is not None:
                    said = "".join(p.text for p in pieces if p.kind == "content")
                    lp = [adapter.chat_logprob_json(step.token)]
                    yield sse_frame(chunk(step.index, {"content": said}, logprobs=lp))
                    pieces = [p for p in pieces if p.kind != "content"]
                for p in pieces:
                    yield sse_frame(chunk(step.index, _delta(p)))
                continue
            c = step.choice
            for p in step.pieces:
                yield sse_frame(chunk(c.index, _delta(p)))
            usages.append(c.usage)
            reason = adapter.finish_reason(c.finish)
            if c.calls and c.reason == "stop":
                reason = "tool_calls"
            last = chunk(c.index, {}, finish=reason)
            if c.check is not None:
                last["choices"][0]["schema_check"] = c.check
            yield sse_frame(last)
    except LlamayError as exc:
        yield sse_frame(openai_error_body(exc))
        return
    finally:
        gen.close()
    if usage_on:
        yield sse_frame(adapter.usage_chunk(rid, model, created, "chat.completion.chunk", usages))
    yield sse_frame("[DONE]")

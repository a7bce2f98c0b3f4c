"""POST /v1/chat/completions: the shared chat pipeline, in OpenAI's shapes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ...engine.client import EventStream, merge, submit_all
from ...runtime import Runtime
from ...types import ErrorEvent, FinishEvent, TokenEvent, Usage
from .. import jsonformat
from ..chatflow import ChatOutput, ChatSetup, Piece, prepare_chat
from ..http import json_response, read_json, sse_frame, sse_response, until_disconnect
from ..ollama.common import sampling_defaults
from . import adapter
from .common import check_plan, collect, session_tokens
from .schemas import ChatRequest, parse_chat, with_defaults

__all__ = ["chat_completions"]


async def chat_completions(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    req = parse_chat(await read_json(request))
    lm = await runtime.use(req.common.model)
    # The model's and the server's sampling defaults, under what the request set.
    req = replace(
        req, common=with_defaults(req.common, await asyncio.to_thread(sampling_defaults, runtime, lm))
    )
    req.common.sampling.validate(lm.model.n_vocab)  # logit_bias ids must be in this vocabulary
    setup = prepare_chat(lm, req.options)
    await check_plan(lm, setup.plan)
    async with session_tokens(request, lm, req.common, setup.tokens, setup.text) as tokens:
        streams = submit_all(
            lm.engine,
            adapter.requests_for(
                tokens, req.common, lm.engine.n_ctx, setup.plan, default_max=runtime.config.max_tokens
            ),
        )
    rid = adapter.new_id("chatcmpl")
    if req.common.stream:
        return sse_response(_frames(rid, lm.name, req, setup, streams))
    choices = await until_disconnect(request, collect(streams, req.logprobs))
    body = adapter.chat_response(rid, lm.name, choices)
    for choice, (text, fin, _) in zip(body["choices"], choices, strict=True):
        out = setup.output()
        out.push(text)
        out.finish()
        _fill_message(choice, out, fin)
        # A schema not enforced in full: say so, and whether the answer satisfies it.
        choice.update(
            await jsonformat.schema_check(req.common.grammar, out.content, complete=fin.reason == "stop")
        )
    return json_response(body)


def _fill_message(choice: dict[str, Any], out: ChatOutput, fin: FinishEvent) -> None:
    message: dict[str, Any] = {"role": "assistant", "content": out.content}
    if out.reasoning:
        message["reasoning_content"] = out.reasoning
    calls = out.calls
    if calls:
        message["content"] = out.content or None
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in calls
        ]
        if fin.reason == "stop":
            choice["finish_reason"] = "tool_calls"
    choice["message"] = message


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


async def _frames(
    rid: str, model: str, req: ChatRequest, setup: ChatSetup, streams: list[EventStream]
) -> AsyncIterator[bytes]:
    created = int(time.time())
    usage_on = req.common.include_usage
    usages: list[Usage] = []
    outputs = [setup.output() for _ in streams]

    def chunk(i: int, delta: dict[str, Any], **kw: Any) -> dict[str, Any]:
        return adapter.chat_chunk(rid, model, created, i, delta, with_usage_field=usage_on, **kw)

    for i in range(len(streams)):
        yield sse_frame(chunk(i, {"role": "assistant", "content": ""}))
    async for i, ev in merge(streams):
        if isinstance(ev, TokenEvent):
            pieces = outputs[i].push(ev.text)
            if req.logprobs:
                said = "".join(p.text for p in pieces if p.kind == "content")
                yield sse_frame(chunk(i, {"content": said}, logprobs=[adapter.chat_logprob_json(ev)]))
                pieces = [p for p in pieces if p.kind != "content"]
            for p in pieces:
                yield sse_frame(chunk(i, _delta(p)))
        elif isinstance(ev, FinishEvent):
            for p in outputs[i].push(ev.text) + outputs[i].finish():
                yield sse_frame(chunk(i, _delta(p)))
            usages.append(ev.usage)
            reason = adapter.finish_reason(ev)
            if outputs[i].calls and ev.reason == "stop":
                reason = "tool_calls"
            last = chunk(i, {}, finish=reason)
            grammar = req.common.grammar
            last["choices"][0].update(
                await jsonformat.schema_check(grammar, outputs[i].content, complete=ev.reason == "stop")
            )
            yield sse_frame(last)
        elif isinstance(ev, ErrorEvent):
            yield sse_frame({"error": {"message": f"generation failed: {ev.error}", "type": "server_error"}})
            return
    if usage_on:
        yield sse_frame(adapter.usage_chunk(rid, model, created, "chat.completion.chunk", usages))
    yield sse_frame("[DONE]")

"""OpenAI-compatible routes: /v1/chat/completions, /v1/completions, /v1/models."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ...engine.client import EventStream, merge, submit_all
from ...errors import EngineError, InvalidRequest, LlamayError
from ...grammar import compile_cached
from ...runtime import LoadedModel, Runtime
from ...types import ErrorEvent, FinishEvent, TokenEvent, Usage
from ..http import json_response, read_json, sse_frame, sse_response, until_disconnect
from ..sessions import align_prompt, reserve_session
from . import adapter
from .schemas import ChatRequest, Common, parse_chat, parse_completion

__all__ = ["openai_routes"]

Choice = tuple[str, FinishEvent, list[TokenEvent] | None]


def chat_prompt(lm: LoadedModel, req: ChatRequest) -> tuple[list[int], str]:
    """Render the messages through the model's template; (tokens, rendered text)."""
    text = lm.template.render(req.messages, add_generation_prompt=True, **req.chat_template_kwargs)
    text = lm.template.strip_bos_eos(text, add_bos=lm.model.add_bos)
    return lm.model.tokenize(text, add_special=True, parse_special=True), text


async def check_grammar(lm: LoadedModel, common: Common) -> None:
    """Compile the request's grammar for this model's vocabulary before anything is queued,
    so a grammar llguidance refuses is a 400, not a failed generation. Off the event loop:
    the first compile also builds the model's llguidance tokenizer."""
    if common.grammar is not None:
        await asyncio.to_thread(compile_cached, common.grammar, lm.model.ll_tokenizer)


@asynccontextmanager
async def session_tokens(
    request: Request, lm: LoadedModel, common: Common, tokens: list[int], text: str | None
) -> AsyncIterator[list[int]]:
    """The prompt tokens to submit: as given, or aligned with the session's context (which
    stays reserved for the request if the body of the `with` submits it)."""
    if common.session is None:
        yield tokens
        return
    async with reserve_session(request, lm, common.session) as held:
        yield align_prompt(lm, held, tokens, text)


def completion_prompt(lm: LoadedModel, prompt: str | list[int]) -> list[int]:
    if isinstance(prompt, list):
        lm.model.check_tokens(prompt)
        return prompt
    return lm.model.tokenize(prompt, add_special=True, parse_special=False)


async def collect(streams: list[EventStream], want_logprobs: bool) -> list[Choice]:
    """Run every choice to its end; an engine error becomes EngineError."""
    texts = [""] * len(streams)
    events: list[list[TokenEvent]] = [[] for _ in streams]
    finishes: list[FinishEvent | None] = [None] * len(streams)
    async for i, ev in merge(streams):
        if isinstance(ev, TokenEvent):
            texts[i] += ev.text
            if want_logprobs:
                events[i].append(ev)
        elif isinstance(ev, FinishEvent):
            texts[i] += ev.text
            finishes[i] = ev
        elif isinstance(ev, ErrorEvent):
            if isinstance(ev.error, LlamayError):
                raise ev.error
            raise EngineError(f"generation failed: {ev.error}")
    out: list[Choice] = []
    for i, fin in enumerate(finishes):
        if fin is None:  # pragma: no cover - merge only ends after every finish
            raise EngineError("generation ended without a finish event")
        out.append((texts[i], fin, events[i] if want_logprobs else None))
    return out


async def chat_completions(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    req = parse_chat(await read_json(request))
    lm = runtime.get(req.common.model)
    tokens, text = chat_prompt(lm, req)
    await check_grammar(lm, req.common)
    async with session_tokens(request, lm, req.common, tokens, text) as tokens:
        streams = submit_all(lm.engine, adapter.requests_for(tokens, req.common, lm.engine.n_ctx))
    rid = adapter.new_id("chatcmpl")
    if req.common.stream:
        return sse_response(_chat_frames(rid, lm.name, req, streams))
    choices = await until_disconnect(request, collect(streams, req.logprobs))
    return json_response(adapter.chat_response(rid, lm.name, choices))


async def _chat_frames(
    rid: str, model: str, req: ChatRequest, streams: list[EventStream]
) -> AsyncIterator[bytes]:
    created = int(time.time())
    usage_on = req.common.include_usage
    usages: list[Usage] = []
    for i in range(len(streams)):
        yield sse_frame(
            adapter.chat_chunk(
                rid, model, created, i, {"role": "assistant", "content": ""}, with_usage_field=usage_on
            )
        )
    async for i, ev in merge(streams):
        if isinstance(ev, TokenEvent):
            if not ev.text and not req.logprobs:
                continue
            lp = [adapter.chat_logprob_json(ev)] if req.logprobs else None
            yield sse_frame(
                adapter.chat_chunk(
                    rid, model, created, i, {"content": ev.text}, logprobs=lp, with_usage_field=usage_on
                )
            )
        elif isinstance(ev, FinishEvent):
            if ev.text:
                yield sse_frame(
                    adapter.chat_chunk(
                        rid, model, created, i, {"content": ev.text}, with_usage_field=usage_on
                    )
                )
            usages.append(ev.usage)
            yield sse_frame(
                adapter.chat_chunk(
                    rid, model, created, i, {}, finish=adapter.finish_reason(ev), with_usage_field=usage_on
                )
            )
        else:
            yield sse_frame({"error": {"message": f"generation failed: {ev.error}", "type": "server_error"}})
            return
    if usage_on:
        yield sse_frame(adapter.usage_chunk(rid, model, created, "chat.completion.chunk", usages))
    yield sse_frame("[DONE]")


async def completions(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    req = parse_completion(await read_json(request))
    lm = runtime.get(req.common.model)
    if len(req.prompts) > 1 and (req.common.stream or req.common.session is not None):
        raise InvalidRequest("streaming and 'llamay_session' take one prompt per request", param="prompt")
    prompts = [completion_prompt(lm, p) for p in req.prompts]
    await check_grammar(lm, req.common)
    text = req.prompts[0] if isinstance(req.prompts[0], str) else None
    # The first prompt is submitted at once so that a session is reserved and released in one place.
    async with session_tokens(request, lm, req.common, prompts[0], text) as first:
        prompts[0] = first
        first_streams = submit_all(lm.engine, adapter.requests_for(first, req.common, lm.engine.n_ctx))
    rid = adapter.new_id("cmpl")
    want_lp = req.logprobs is not None
    if req.common.stream:
        echo = lm.model.detokenize(prompts[0]) if req.echo else ""
        return sse_response(_completion_frames(rid, lm.name, req.common, first_streams, echo, want_lp))
    choices: list[Choice] = []
    prefixes: list[str] = []
    for i, tokens in enumerate(prompts):
        streams = (
            first_streams
            if i == 0
            else submit_all(lm.engine, adapter.requests_for(tokens, req.common, lm.engine.n_ctx))
        )
        prefix = lm.model.detokenize(tokens) if req.echo else ""
        got = await until_disconnect(request, collect(streams, want_lp))
        choices.extend((prefix + text, fin, evs) for text, fin, evs in got)
        prefixes.extend(prefix for _ in got)
    body = adapter.completion_response(rid, lm.name, choices)
    if want_lp:  # text offsets count from the start of each choice's text (after the echo)
        for choice, prefix in zip(body["choices"], prefixes, strict=True):
            choice["logprobs"]["text_offset"] = [o + len(prefix) for o in choice["logprobs"]["text_offset"]]
    return json_response(body)


async def _completion_frames(
    rid: str, model: str, common: Common, streams: list[EventStream], echo: str, want_lp: bool
) -> AsyncIterator[bytes]:
    created = int(time.time())
    usage_on = common.include_usage
    usages: list[Usage] = []
    if echo:
        for i in range(len(streams)):
            yield sse_frame(adapter.completion_chunk(rid, model, created, i, echo, with_usage_field=usage_on))
    async for i, ev in merge(streams):
        if isinstance(ev, TokenEvent):
            if not ev.text and not want_lp:
                continue
            lp = adapter.completion_logprobs_json([ev], 0) if want_lp else None
            yield sse_frame(
                adapter.completion_chunk(
                    rid, model, created, i, ev.text, logprobs=lp, with_usage_field=usage_on
                )
            )
        elif isinstance(ev, FinishEvent):
            usages.append(ev.usage)
            yield sse_frame(
                adapter.completion_chunk(
                    rid,
                    model,
                    created,
                    i,
                    ev.text,
                    finish=adapter.finish_reason(ev),
                    with_usage_field=usage_on,
                )
            )
        else:
            yield sse_frame({"error": {"message": f"generation failed: {ev.error}", "type": "server_error"}})
            return
    if usage_on:
        yield sse_frame(adapter.usage_chunk(rid, model, created, "text_completion", usages))
    yield sse_frame("[DONE]")


async def list_models(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    return json_response({"object": "list", "data": [model_json(m) for m in runtime.models()]})


async def get_model(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    return json_response(model_json(runtime.get(request.path_params["model"])))


def model_json(m: LoadedModel) -> dict[str, Any]:
    return {"id": m.name, "object": "model", "created": int(m.loaded_at), "owned_by": "llamay"}


def openai_routes() -> list[Route]:
    return [
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model:path}", get_model, methods=["GET"]),
    ]

"""OpenAI-compatible routes: /v1/chat/completions, /v1/completions, /v1/models."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ...engine.client import EventStream, merge, submit_all
from ...engine.request import ConstraintPlan
from ...errors import InvalidRequest
from ...runtime import LoadedModel, Runtime
from ...types import DEFAULTABLE, FinishEvent, TokenEvent, Usage
from .. import jsonformat
from ..http import json_response, read_json, sse_frame, sse_response, until_disconnect
from ..ollama.common import effective_params
from . import adapter
from .chat import chat_completions
from .common import Choice, check_plan, collect, session_tokens
from .schemas import Common, parse_completion

__all__ = ["openai_routes"]


def completion_prompt(lm: LoadedModel, prompt: str | list[int]) -> list[int]:
    if isinstance(prompt, list):
        lm.model.check_tokens(prompt)
        return prompt
    return lm.model.tokenize(prompt, add_special=True, parse_special=False)


async def completions(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    req = parse_completion(await read_json(request))
    lm = await runtime.use(req.common.model)
    req.common.sampling.validate(lm.model.n_vocab)  # logit_bias ids must be in this vocabulary
    if len(req.prompts) > 1 and (req.common.stream or req.common.session is not None):
        raise InvalidRequest("streaming and 'llamay_session' take one prompt per request", param="prompt")
    prompts = [completion_prompt(lm, p) for p in req.prompts]
    await check_plan(lm, ConstraintPlan(req.common.grammar) if req.common.grammar is not None else None)
    text = req.prompts[0] if isinstance(req.prompts[0], str) else None
    # The first prompt is submitted at once so that a session is reserved and released in one place.
    async with session_tokens(request, lm, req.common, prompts[0], text) as first:
        prompts[0] = first
        first_streams = submit_all(
            lm.engine,
            adapter.requests_for(first, req.common, lm.engine.n_ctx, default_max=runtime.config.max_tokens),
        )
    rid = adapter.new_id("cmpl")
    want_lp = req.logprobs is not None
    if req.common.stream:
        echo = lm.model.detokenize(prompts[0]) if req.echo else ""
        return sse_response(_completion_frames(rid, lm.name, req.common, first_streams, echo, want_lp))
    choices: list[Choice] = []
    prefixes: list[str] = []
    reports: list[dict[str, Any] | None] = []
    for i, tokens in enumerate(prompts):
        streams = (
            first_streams
            if i == 0
            else submit_all(
                lm.engine,
                adapter.requests_for(
                    tokens, req.common, lm.engine.n_ctx, default_max=runtime.config.max_tokens
                ),
            )
        )
        prefix = lm.model.detokenize(tokens) if req.echo else ""
        got = await until_disconnect(request, collect(streams, want_lp))
        choices.extend((prefix + text, fin, evs) for text, fin, evs in got)
        prefixes.extend(prefix for _ in got)
        reports.extend([await _check(req.common, text, fin) for text, fin, _ in got])
    body = adapter.completion_response(rid, lm.name, choices)
    for choice, report in zip(body["choices"], reports, strict=True):
        if report is not None:
            choice["schema_check"] = report
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
    texts = [""] * len(streams)
    if echo:
        for i in range(len(streams)):
            yield sse_frame(adapter.completion_chunk(rid, model, created, i, echo, with_usage_field=usage_on))
    async for i, ev in merge(streams):
        if isinstance(ev, TokenEvent):
            texts[i] += ev.text
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
            texts[i] += ev.text
            last = adapter.completion_chunk(
                rid, model, created, i, ev.text, finish=adapter.finish_reason(ev), with_usage_field=usage_on
            )
            report = await _check(common, texts[i], ev)
            if report is not None:
                last["choices"][0]["schema_check"] = report
            yield sse_frame(last)
        else:
            yield sse_frame({"error": {"message": f"generation failed: {ev.error}", "type": "server_error"}})
            return
    if usage_on:
        yield sse_frame(adapter.usage_chunk(rid, model, created, "text_completion", usages))
    yield sse_frame("[DONE]")


async def _check(common: Common, text: str, fin: FinishEvent) -> dict[str, Any] | None:
    """The schema report of one choice (see jsonformat.check), off the event loop."""
    if common.grammar is None or not common.grammar.unenforced:
        return None
    return await asyncio.to_thread(jsonformat.check, common.grammar, text, complete=fin.reason == "stop")


async def list_models(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    models = runtime.models()
    sampling = await asyncio.to_thread(lambda: [model_sampling(runtime, m) for m in models])
    return json_response({"object": "list", "data": [model_json(m, s) for m, s in zip(models, sampling, strict=True)]})


async def get_model(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    m = runtime.get(request.path_params["model"])
    return json_response(model_json(m, await asyncio.to_thread(model_sampling, runtime, m)))


def model_sampling(runtime: Runtime, m: LoadedModel) -> dict[str, Any]:
    """The sampling defaults a request that sets nothing gets on top of its API's own: the
    GGUF's general.sampling.*, the server's flags, what `create` set (reads the GGUF header)."""
    return {k: v for k, v in effective_params(runtime, m.name, m.info.path).items() if k in DEFAULTABLE}


def model_json(m: LoadedModel, sampling: dict[str, Any] | None = None) -> dict[str, Any]:
    """A model object; `llamay_sampling` (an extension) holds its sampling defaults."""
    out = {"id": m.name, "object": "model", "created": int(m.loaded_at), "owned_by": "llamay"}
    return out | {"llamay_sampling": sampling or {}}


def openai_routes() -> list[Route]:
    return [
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model:path}", get_model, methods=["GET"]),
    ]

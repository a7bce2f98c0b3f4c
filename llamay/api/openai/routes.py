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
from ...errors import EngineError, InvalidRequest
from ...runtime import LoadedModel, Runtime
from ...types import FinishEvent, TokenEvent, Usage
from .. import jsonformat
from ..http import json_response, read_json, sse_frame, sse_response, until_disconnect
from ..ollama.common import sampling_defaults
from . import adapter
from .chat import chat_completions
from .common import Choice, check_plan, collect, session_tokens
from .schemas import Common, parse_completion, with_defaults

__all__ = ["openai_routes"]


def completion_prompt(lm: LoadedModel, prompt: str | list[int]) -> list[int]:
    if isinstance(prompt, list):
        lm.model.check_tokens(prompt)
        return prompt
    return lm.model.tokenize(prompt, add_special=True, parse_special=False)


async def completions(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    req = parse_completion(await read_json(request))
    common = req.common
    # echo with logprobs scores the prompt's own tokens (lm-evaluation-harness log-likelihoods).
    score = req.echo and req.logprobs is not None
    if score and common.stream:
        raise InvalidRequest("'echo' with 'logprobs' is not supported when streaming", param="stream")
    if score and common.session is not None:
        raise InvalidRequest("'echo' with 'logprobs' cannot score a 'llamay_session' prompt", param="echo")
    lm = await runtime.use(common.model)
    common = with_defaults(common, await asyncio.to_thread(sampling_defaults, runtime, lm))
    common.sampling.validate(lm.model.n_vocab)  # logit_bias ids must be in this vocabulary
    if len(req.prompts) > 1 and (common.stream or common.session is not None):
        raise InvalidRequest("streaming and 'llamay_session' take one prompt per request", param="prompt")
    prompts = [completion_prompt(lm, p) for p in req.prompts]
    await check_plan(lm, ConstraintPlan(common.grammar) if common.grammar is not None else None)
    text = req.prompts[0] if isinstance(req.prompts[0], str) else None
    n_ctx, default_max = lm.engine.n_ctx, runtime.config.max_tokens
    # Every prompt is submitted at once, so they share decode steps; inside the `with`, so
    # that a session is reserved and released in one place.
    async with session_tokens(request, lm, common, prompts[0], text) as first:
        prompts[0] = first
        engine_requests = [
            r
            for tokens in prompts
            for r in adapter.requests_for(
                tokens,
                common,
                n_ctx,
                default_max=default_max,
                prompt_logprobs=req.logprobs if score else None,
            )
        ]
        cap = lm.engine.config.max_queue
        if len(engine_requests) > cap:  # a full queue would be a 503 that no retry could cure
            raise InvalidRequest(f"at most {cap} prompts times 'n' fit in one request", param="prompt")
        streams = submit_all(lm.engine, engine_requests)
    rid = adapter.new_id("cmpl")
    want_lp = req.logprobs is not None
    if common.stream:
        echoed = lm.model.detokenize(prompts[0]) if req.echo else ""
        return sse_response(_completion_frames(rid, lm.name, common, streams, echoed, want_lp))
    got = await until_disconnect(request, collect(streams, want_lp))
    choices: list[Choice] = []
    echoes: list[adapter.Echo] = []
    for i, (out, fin, evs) in enumerate(got):
        tokens = prompts[i // common.n]
        if score and fin.prompt_logprobs is None:
            raise EngineError("the prompt could not be scored (the KV cache is full?)")
        echo = adapter.Echo(
            lm.model.detokenize(tokens) if req.echo else "",
            lm.model.piece(tokens[0]) if score else b"",
            fin.prompt_logprobs if score else None,
        )
        choices.append((echo.text + out, fin, evs))
        echoes.append(echo)
    body = adapter.completion_response(rid, lm.name, choices, echoes, common.n)
    for choice, (out, fin, _) in zip(body["choices"], got, strict=True):
        choice.update(await jsonformat.schema_check(common.grammar, out, complete=fin.reason == "stop"))
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
            last["choices"][0].update(
                await jsonformat.schema_check(common.grammar, texts[i], complete=ev.reason == "stop")
            )
            yield sse_frame(last)
        else:
            yield sse_frame({"error": {"message": f"generation failed: {ev.error}", "type": "server_error"}})
            return
    if usage_on:
        yield sse_frame(adapter.usage_chunk(rid, model, created, "text_completion", usages))
    yield sse_frame("[DONE]")


async def list_models(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    models = runtime.models()
    sampling = await asyncio.to_thread(lambda: [sampling_defaults(runtime, m) for m in models])
    return json_response(
        {"object": "list", "data": [model_json(m, s) for m, s in zip(models, sampling, strict=True)]}
    )


async def get_model(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    m = runtime.get(request.path_params["model"])
    return json_response(model_json(m, await asyncio.to_thread(sampling_defaults, runtime, m)))


def model_json(m: LoadedModel, sampling: dict[str, Any] | None = None) -> dict[str, Any]:
    """A model object; `llamay_sampling` (an extension) holds its sampling defaults: the
    GGUF's general.sampling.*, then the server's flags, then what `create` set."""
    out = {"id": m.name, "object": "model", "created": int(m.loaded_at), "owned_by": "llamay"}
    return out | {"llamay_sampling": sampling or {}}


def openai_routes() -> list[Route]:
    return [
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model:path}", get_model, methods=["GET"]),
    ]

"""OpenAI-compatible routes: /v1/chat/completions, /v1/completions, /v1/models."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ...chat.prepare import FimInput, Input, Job, ModelRef, TextInput, prepare, sampling_defaults
from ...embed.service import Encoder
from ...errors import InvalidRequest, ModelNotFound
from ...runtime import LoadedModel, Runtime
from ..anthropic import models as anthropic_models
from ..embeddings import find_encoder, served_encoders
from ..http import json_response, read_json, respond
from ..state import state_of
from . import adapter
from .chat import chat_completions, submit
from .completions_render import CompletionRenderer, Echo
from .schemas import CompletionRequest, parse_completion

__all__ = ["openai_routes", "completion_job"]


def completion_job(req: CompletionRequest) -> Job:
    """The pipeline's job for a parsed completion request: each prompt as plain text
    (special-token names in it are text) or token ids, or filled in the middle. What the
    fields cannot do together is a 400 naming one."""
    common = req.common
    # echo with logprobs scores the prompt's own tokens (lm-evaluation-harness log-likelihoods).
    score = req.echo and req.logprobs is not None
    if score and common.stream:
        raise InvalidRequest("'echo' with 'logprobs' is not supported when streaming", param="stream")
    if score and common.session is not None:
        raise InvalidRequest("'echo' with 'logprobs' cannot score a 'llamay_session' prompt", param="echo")
    if len(req.prompts) > 1 and (common.stream or common.session is not None):
        raise InvalidRequest("streaming and 'llamay_session' take one prompt per request", param="prompt")
    if req.suffix is not None and common.session is not None:
        raise InvalidRequest(
            "'suffix' (fill-in-the-middle) cannot continue a 'llamay_session'", param="suffix"
        )
    inputs: list[Input] = [
        FimInput(p, req.suffix, common.grammar)
        if req.suffix is not None
        else TextInput(p, common.grammar, special=False)
        for p in req.prompts
    ]
    knobs = common.knobs(
        keep_tokens=req.logprobs is not None, prompt_logprobs=req.logprobs if score else None
    )
    return Job(ModelRef(common.model), tuple(inputs), knobs)


async def completions(request: Request) -> Response:
    # Parsing compiles schemas and tool specs: CPU work, off the event loop.
    req = await asyncio.to_thread(parse_completion, await read_json(request))
    common = req.common
    score = req.echo and req.logprobs is not None
    ready = await prepare(state_of(request).runtime, completion_job(req))
    gen = await submit(request, ready, common.session)
    model = ready.lm.model
    echoes = [
        Echo(
            model.detokenize(p.tokens) if req.echo else "", model.piece(p.tokens[0]) if score else b""
        )
        for p in gen.prompts
    ]
    renderer = CompletionRenderer(
        adapter.new_id("cmpl"),
        ready.lm.name,
        streaming=common.stream,
        include_usage=common.include_usage,
        logprobs=req.logprobs is not None,
        n=common.n,
        echoes=echoes,
        score=score,
    )
    return await respond(request, gen, renderer)


async def list_models(request: Request) -> Response:
    if anthropic_models.speaks_anthropic(request):
        return await anthropic_models.list_models(request)
    runtime: Runtime = state_of(request).runtime
    models = runtime.models()
    sampling = [await sampling_defaults(runtime, m) for m in models]
    data = [model_json(m, s) for m, s in zip(models, sampling, strict=True)]
    names = {m.name for m in models}
    data += [encoder_json(e) for e in served_encoders(request) if e.name not in names]
    return json_response({"object": "list", "data": data})


async def get_model(request: Request) -> Response:
    if anthropic_models.speaks_anthropic(request):
        return await anthropic_models.get_model(request)
    runtime: Runtime = state_of(request).runtime
    name = request.path_params["model"]
    try:
        m = runtime.get(name)
    except ModelNotFound:
        enc = find_encoder(request, name)
        if enc is None:
            raise
        return json_response(encoder_json(enc))
    return json_response(model_json(m, await sampling_defaults(runtime, m)))


def model_json(m: LoadedModel, sampling: dict[str, Any] | None = None) -> dict[str, Any]:
    """A model object; `llamay_sampling` (an extension) holds its sampling defaults: the
    GGUF's general.sampling.*, then the server's flags, then what `create` set."""
    out = {"id": m.name, "object": "model", "created": int(m.loaded_at), "owned_by": "llamay"}
    return out | {"llamay_sampling": sampling or {}}


def encoder_json(enc: Encoder) -> dict[str, Any]:
    """An encoder (-embed, -rerank) as a model object; `llamay_kind` says what it serves:
    "embed" (/v1/embeddings) or "rank" (/rerank)."""
    return {
        "id": enc.name,
        "object": "model",
        "created": int(enc.loaded_at),
        "owned_by": "llamay",
        "llamay_kind": enc.kind,
    }


def openai_routes() -> list[Route]:
    return [
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model:path}", get_model, methods=["GET"]),
    ]

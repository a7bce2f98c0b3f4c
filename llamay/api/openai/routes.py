"""OpenAI-compatible routes: /v1/chat/completions, /v1/completions, /v1/models."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ...chat.defaults import sampling_defaults
from ...chat.fim import fim_prompt
from ...chat.pipeline import Delta, Done, Generation, Prompt, start, start_batch
from ...embed.service import Encoder
from ...engine.request import ConstraintPlan
from ...errors import EngineError, InvalidRequest, ModelNotFound
from ...grammar import Grammar
from ...runtime import LoadedModel, Runtime
from ...types import FinishEvent, TokenEvent
from ..anthropic import models as anthropic_models
from ..embeddings import find_encoder, served_encoders
from ..http import json_response, read_json, sse_response, until_disconnect
from ..sessions import held_context
from ..state import state_of
from . import adapter
from .chat import chat_completions, run_spec, stream_frames
from .schemas import Common, parse_completion, with_defaults

__all__ = ["openai_routes"]


def completion_prompt(
    lm: LoadedModel, prompt: str | list[int], grammar: Grammar | None, suffix: str | None = None
) -> Prompt:
    if suffix is not None:
        return fim_prompt(lm, prompt, suffix, grammar)
    if isinstance(prompt, list):
        lm.model.check_tokens(prompt)
        tokens = prompt
    else:
        tokens = lm.model.tokenize(prompt, add_special=True, parse_special=False)
    plan = ConstraintPlan(grammar, label="json") if grammar is not None else None
    return Prompt(tokens, prompt if isinstance(prompt, str) else None, None, plan, grammar)


async def completions(request: Request) -> Response:
    runtime: Runtime = state_of(request).runtime
    # Parsing compiles schemas and tool specs: CPU work, off the event loop.
    req = await asyncio.to_thread(parse_completion, await read_json(request))
    common = req.common
    # echo with logprobs scores the prompt's own tokens (lm-evaluation-harness log-likelihoods).
    score = req.echo and req.logprobs is not None
    if score and common.stream:
        raise InvalidRequest("'echo' with 'logprobs' is not supported when streaming", param="stream")
    if score and common.session is not None:
        raise InvalidRequest("'echo' with 'logprobs' cannot score a 'llamay_session' prompt", param="echo")
    lm = await runtime.use(common.model)
    common = with_defaults(common, await sampling_defaults(runtime, lm))
    common.sampling.validate(lm.model.n_vocab)  # logit_bias ids must be in this vocabulary
    if len(req.prompts) > 1 and (common.stream or common.session is not None):
        raise InvalidRequest("streaming and 'llamay_session' take one prompt per request", param="prompt")
    if req.suffix is not None and common.session is not None:
        raise InvalidRequest(
            "'suffix' (fill-in-the-middle) cannot continue a 'llamay_session'", param="suffix"
        )
    # Tokenizing large prompts is CPU work: off the event loop.
    prompts = await asyncio.to_thread(
        lambda: [completion_prompt(lm, p, common.grammar, req.suffix) for p in req.prompts]
    )
    want_lp = req.logprobs is not None
    spec = run_spec(common, runtime, keep_tokens=want_lp, prompt_logprobs=req.logprobs if score else None)
    async with held_context(request, lm, common.session) as held:
        if held is not None:
            gen = await start(lm, prompts[0], spec, held=held)
        else:  # every prompt at once, so they share decode steps
            gen = await start_batch(lm, prompts, spec)
    rid = adapter.new_id("cmpl")
    if common.stream:
        echoed = lm.model.detokenize(gen.prompt.tokens) if req.echo else ""
        return sse_response(_completion_frames(rid, lm.name, common, gen, echoed, want_lp))
    got = await until_disconnect(request, gen.collect())
    choices: list[tuple[str, FinishEvent, list[TokenEvent] | None]] = []
    echoes: list[adapter.Echo] = []
    for c in got:
        tokens = gen.prompts[c.index // common.n].tokens
        if score and c.finish.prompt_logprobs is None:
            raise EngineError("the prompt could not be scored (the KV cache is full?)")
        echo = adapter.Echo(
            lm.model.detokenize(tokens) if req.echo else "",
            lm.model.piece(tokens[0]) if score else b"",
            c.finish.prompt_logprobs if score else None,
        )
        choices.append((echo.text + c.text, c.finish, c.tokens))
        echoes.append(echo)
    body = adapter.completion_response(rid, lm.name, choices, echoes, common.n)
    for out, c in zip(body["choices"], got, strict=True):
        if c.check is not None:
            out["schema_check"] = c.check
    return json_response(body)


def _completion_frames(
    rid: str, model: str, common: Common, gen: Generation, echo: str, want_lp: bool
) -> AsyncIterator[bytes]:
    created = int(time.time())
    usage_on = common.include_usage

    def chunk(i: int, text: str, **kw: Any) -> dict[str, Any]:
        return adapter.completion_chunk(rid, model, created, i, text, with_usage_field=usage_on, **kw)

    def frames_of(step: Delta | Done) -> list[dict[str, Any]]:
        if isinstance(step, Delta):
            text = "".join(p.text for p in step.pieces)
            if not text and not want_lp:
                return []
            lp = adapter.completion_logprobs_json([step.token], 0) if want_lp and step.token else None
            return [chunk(step.index, text, logprobs=lp)]
        c = step.choice
        last = chunk(c.index, "".join(p.text for p in step.pieces), finish=adapter.finish_reason(c.finish))
        return [adapter.finish_chunk(last, c.finish, c.check)]

    first = [chunk(i, echo) for i in range(len(gen.streams))] if echo else []
    usage = None
    if usage_on:
        usage = lambda us: adapter.usage_chunk(rid, model, created, "text_completion", us)  # noqa: E731
    return stream_frames(gen, first, frames_of, usage)


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

"""POST /api/chat and /api/generate: the shared chat pipeline, in Ollama's NDJSON shapes."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...chat.fim import fim_prompt
from ...chat.flow import ChatOptions, Piece, effort_budget
from ...chat.pipeline import Choice, Delta, Generation, Prompt, chat_prompt, start, text_prompt
from ...chat.tools import ToolChoice
from ...errors import Forbidden, InvalidRequest, LlamayError
from ...runtime import MANAGE_MODELS, LoadedModel
from ...types import FinishEvent
from ..errors import error_body
from ..http import read_json, until_disconnect
from ..state import state_of
from . import adapter
from .common import (
    loaded_alias,
    model_defaults,
    ndjson_line,
    ndjson_response,
    runtime_feature,
    use_model,
)
from .gotemplate import render_template
from .reply import Reply, Step
from .schemas import Common, OllamaGenerate, parse_chat, parse_generate

__all__ = ["chat", "generate"]

log = logging.getLogger("llamay.api.ollama")


@dataclass
class Turn:
    """One generation in flight and how to report it. `context` None: no `context` in
    the final object (chat, raw generate); else the prompt tokens it starts with."""

    name: str
    lm: LoadedModel
    common: Common
    t0: float
    load_ns: int
    chat: bool
    context: list[int] | None = None


async def chat(request: Request) -> Response:
    t0 = time.perf_counter()
    # Parsing compiles schemas and tool specs: CPU work, off the event loop.
    req = await asyncio.to_thread(parse_chat, await read_json(request))
    c = req.common
    if not req.messages:
        return await _load_or_unload(request, c, chat=True)
    if req.tools and c.grammar is not None:
        raise InvalidRequest("'format' cannot be combined with 'tools'", param="format")
    lm, load_ns, c, system = await _model(request, c)
    messages = req.messages
    if system and not any(m["role"] == "system" for m in messages):
        messages = [{"role": "system", "content": system}, *messages]
    opts = ChatOptions(
        messages=messages,
        tools=req.tools,
        tool_choice=ToolChoice("auto" if req.tools else "none"),
        grammar=c.grammar,
        thinking=c.think is not False,
        thinking_budget=effort_budget(c.think_level),
        template_kwargs=_think_kwargs(c),
        finish_tool=False,  # not an Ollama concept: with tools the model may answer in text
    )
    turn = Turn(c.model or lm.name, lm, c, t0, load_ns, chat=True)
    # Rendering and tokenizing a large conversation is CPU work: off the event loop.
    return await _run(request, turn, await asyncio.to_thread(chat_prompt, lm, opts))


async def generate(request: Request) -> Response:
    t0 = time.perf_counter()
    req = await asyncio.to_thread(parse_generate, await read_json(request))
    c = req.common
    if not req.prompt:
        return await _load_or_unload(request, c, chat=False)
    lm, load_ns, c, system = await _model(request, c)
    # A model's own system prompt starts a conversation; a continued one (context) has it.
    req = replace(req, common=c, system=req.system or (None if req.context else system))
    prompt = await asyncio.to_thread(_generate_prompt, lm, req)
    context = None if req.raw or req.suffix is not None else prompt.tokens
    turn = Turn(c.model or lm.name, lm, c, t0, load_ns, chat=False, context=context)
    return await _run(request, turn, prompt)


async def _model(request: Request, c: Common) -> tuple[LoadedModel, int, Common, str | None]:
    """The model (loaded if need be, and the nanoseconds that took), the request's fields
    over the model's defaults, and the model's own system prompt."""
    lm, load_ns = await use_model(request, c.model, c.keep_alive)
    params, system = await model_defaults(request, lm)
    return lm, load_ns, c.with_model_defaults(params), system


def _think_kwargs(c: Common) -> dict[str, Any]:
    return {"reasoning_effort": c.think_level} if c.think_level else {}


def _generate_prompt(lm: LoadedModel, req: OllamaGenerate) -> Prompt:
    """The prompt: through the model's own template (reasoning and content split), or as
    plain text for raw prompts and custom templates. A `context` from a
    previous answer goes first, and the new part then gets no BOS of its own."""
    if req.suffix is not None:  # the model writes what goes between prompt and suffix
        return fim_prompt(lm, req.prompt, req.suffix, req.common.grammar)
    model = lm.model
    prefix = list(req.context or [])
    model.check_tokens(prefix)
    if req.raw or req.template is not None:
        text = req.prompt
        if req.template is not None and not req.raw:
            text = render_template(req.template, system=req.system or "", prompt=req.prompt)
        return text_prompt(lm, text, req.common.grammar, prefix=prefix)
    messages = ([{"role": "system", "content": req.system}] if req.system else []) + [
        {"role": "user", "content": req.prompt}
    ]
    opts = ChatOptions(
        messages=messages,
        grammar=req.common.grammar,
        thinking=req.common.think is not False,
        template_kwargs=_think_kwargs(req.common),
    )
    prompt = chat_prompt(lm, opts)
    tokens = prompt.tokens
    if prefix and model.add_bos and tokens[:1] == [model.bos_id]:
        tokens = tokens[1:]
    return replace(prompt, tokens=prefix + tokens, text=None if prefix else prompt.text)


async def _load_or_unload(request: Request, c: Common, *, chat: bool) -> Response:
    """Ollama's empty request: load the model, or unload it when keep_alive is 0 (an
    admin's only: the model is shared; a user's keep_alive elsewhere is ignored)."""
    if c.keep_alive == 0:
        if not MANAGE_MODELS.get():
            raise Forbidden("unloading a model needs an admin key")
        unload = runtime_feature(request, "runtime", "unload")
        await unload(loaded_alias(state_of(request).runtime, c.model))
        reason = "unload"
    else:
        await use_model(request, c.model, c.keep_alive)
        reason = "load"
    return JSONResponse(adapter.load_reply(c.model, adapter.iso_time(time.time()), chat=chat, reason=reason))


async def _run(request: Request, turn: Turn, prompt: Prompt) -> Response:
    lm, gen = turn.lm, turn.common.gen
    if gen.num_ctx is not None and gen.num_ctx > lm.engine.n_ctx:
        log.info(
            "num_ctx %d asked for %s; its loaded context holds %d tokens",
            gen.num_ctx,
            lm.name,
            lm.engine.n_ctx,
        )
    default_max = state_of(request).runtime.config.max_tokens
    spec = adapter.run_spec(gen, lm.engine.n_ctx, default_max=default_max)
    run = await start(lm, prompt, replace(spec, keep_tokens=True))
    if turn.common.stream:
        return ndjson_response(_lines(turn, run))
    (choice,) = await until_disconnect(request, run.collect())
    reply = Reply(show_thinking=turn.common.think is not False)
    pieces = [Piece("reasoning", choice.reasoning), Piece("content", choice.content)]
    reply.step(pieces, choice.calls, final=True)
    whole = Step(reply.thinking, reply.content, reply.tool_calls)
    events = choice.tokens or []
    lps = [adapter.logprob_json(e) for e in events] if turn.common.logprobs else None
    final = _final(turn, choice.finish, whole, lps, [e.token for e in events])
    return JSONResponse({**final, **_check(choice)})


def _check(choice: Choice) -> dict[str, Any]:
    """A schema not enforced in full: say so, and whether the answer satisfies it."""
    return {"schema_check": choice.check} if choice.check is not None else {}


def _chunk(turn: Turn, step: Step, lps: list[dict[str, Any]] | None) -> dict[str, Any]:
    now = adapter.iso_time(time.time())
    if turn.chat:
        return adapter.chat_chunk(
            turn.name,
            now,
            content=step.content,
            thinking=step.thinking,
            tool_calls=step.tool_calls,
            logprobs=lps,
        )
    return adapter.generate_chunk(turn.name, now, response=step.content, thinking=step.thinking, logprobs=lps)


def _final(
    turn: Turn, fin: FinishEvent, step: Step, lps: list[dict[str, Any]] | None, generated: list[int]
) -> dict[str, Any]:
    now = adapter.iso_time(time.time())
    stats = adapter.stats_json(
        fin, load_ns=turn.load_ns, total_ns=adapter.nanos(time.perf_counter() - turn.t0)
    )
    if turn.chat:
        return adapter.chat_final(
            turn.name, now, fin, stats, content=step.content, thinking=step.thinking,
            tool_calls=step.tool_calls, logprobs=lps,
        )  # fmt: skip
    context = turn.context + generated if turn.context is not None else None
    return adapter.generate_final(
        turn.name,
        now,
        fin,
        stats,
        response=step.content,
        thinking=step.thinking,
        context=context,
        logprobs=lps,
    )


async def _lines(turn: Turn, run: Generation) -> AsyncIterator[bytes]:
    reply = Reply(show_thinking=turn.common.think is not False)
    generated: list[int] = []
    try:
        async for step in run:
            if isinstance(step, Delta):
                lps = None
                if step.token is not None:
                    generated.append(step.token.token)
                    lps = [adapter.logprob_json(step.token)] if turn.common.logprobs else None
                shown = reply.step(step.pieces, run.calls(0), final=False)
                if shown or lps:
                    yield ndjson_line(_chunk(turn, shown, lps))
                continue
            shown = reply.step(step.pieces, step.choice.calls, final=True)
            if shown:
                yield ndjson_line(_chunk(turn, shown, None))
            final = _final(turn, step.choice.finish, Step(), None, generated)
            yield ndjson_line({**final, **_check(step.choice)})
    except LlamayError as exc:
        yield ndjson_line(error_body(exc, "ollama"))
    finally:
        run.close()

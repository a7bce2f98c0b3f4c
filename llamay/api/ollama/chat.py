"""POST /api/chat and /api/generate: the shared chat pipeline, in Ollama's NDJSON shapes."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...chat.tools import ToolChoice
from ...engine.client import EventStream, merge, submit_all
from ...engine.request import ConstraintPlan
from ...errors import EngineError, InvalidRequest, LlamayError
from ...runtime import LoadedModel
from ...types import ErrorEvent, FinishEvent, TokenEvent
from .. import jsonformat
from ..chatflow import ChatOptions, ChatSetup, prepare_chat
from ..http import read_json, until_disconnect
from ..openai.common import check_plan
from . import adapter
from .common import loaded_alias, model_defaults, ndjson_line, ndjson_response, runtime_feature, use_model
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
    setup: ChatSetup | None
    common: Common
    t0: float
    load_ns: int
    chat: bool
    context: list[int] | None = None


async def chat(request: Request) -> Response:
    t0 = time.perf_counter()
    req = parse_chat(await read_json(request))
    c = req.common
    if not req.messages:
        return await _load_or_unload(request, c, chat=True)
    if req.tools and c.grammar is not None:
        raise InvalidRequest("'format' cannot be combined with 'tools'", param="format")
    lm, load_ns = await use_model(request, c.model, c.keep_alive)
    params, system = await model_defaults(request, lm)
    c = c.with_model_defaults(params)
    messages = req.messages
    if system and not any(m["role"] == "system" for m in messages):
        messages = [{"role": "system", "content": system}, *messages]
    opts = ChatOptions(
        messages=messages,
        tools=req.tools,
        tool_choice=ToolChoice("auto" if req.tools else "none"),
        grammar=c.grammar,
        thinking=c.think is not False,
        template_kwargs=_think_kwargs(c),
        finish_tool=False,  # not an Ollama concept: with tools the model may answer in text
    )
    setup = prepare_chat(lm, opts)
    turn = Turn(c.model or lm.name, lm, setup, c, t0, load_ns, chat=True)
    return await _run(request, turn, setup.tokens, setup.plan)


async def generate(request: Request) -> Response:
    t0 = time.perf_counter()
    req = parse_generate(await read_json(request))
    c = req.common
    if not req.prompt:
        return await _load_or_unload(request, c, chat=False)
    lm, load_ns = await use_model(request, c.model, c.keep_alive)
    params, system = await model_defaults(request, lm)
    c = c.with_model_defaults(params)
    # A model's own system prompt starts a conversation; a continued one (context) has it.
    req = replace(req, common=c, system=req.system or (None if req.context else system))
    setup, tokens = _generate_prompt(lm, req)
    plan = setup.plan if setup is not None else _plain_plan(c)
    turn = Turn(
        c.model or lm.name, lm, setup, c, t0, load_ns, chat=False, context=None if req.raw else tokens
    )
    return await _run(request, turn, tokens, plan)


def _think_kwargs(c: Common) -> dict[str, Any]:
    return {"reasoning_effort": c.think_level} if c.think_level else {}


def _plain_plan(c: Common) -> ConstraintPlan | None:
    return ConstraintPlan(c.grammar, label="json") if c.grammar is not None else None


def _generate_prompt(lm: LoadedModel, req: OllamaGenerate) -> tuple[ChatSetup | None, list[int]]:
    """The prompt tokens, and the chat setup when the model's own template is used (raw
    prompts and custom templates are plain text: no reasoning split). A `context` from a
    previous answer goes first, and the new part then gets no BOS of its own."""
    model = lm.model
    prefix = list(req.context or [])
    model.check_tokens(prefix)
    if req.raw or req.template is not None:
        text = req.prompt
        if req.template is not None and not req.raw:
            text = render_template(req.template, system=req.system or "", prompt=req.prompt)
        return None, prefix + model.tokenize(text, add_special=not prefix, parse_special=True)
    messages = ([{"role": "system", "content": req.system}] if req.system else []) + [
        {"role": "user", "content": req.prompt}
    ]
    opts = ChatOptions(
        messages=messages,
        grammar=req.common.grammar,
        thinking=req.common.think is not False,
        template_kwargs=_think_kwargs(req.common),
    )
    setup = prepare_chat(lm, opts)
    tokens = setup.tokens
    if prefix and model.add_bos and tokens[:1] == [model.bos_id]:
        tokens = tokens[1:]
    return setup, prefix + tokens


async def _load_or_unload(request: Request, c: Common, *, chat: bool) -> Response:
    """Ollama's empty request: load the model, or unload it when keep_alive is 0."""
    if c.keep_alive == 0:
        unload = runtime_feature(request, "runtime", "unload")
        await unload(loaded_alias(request.app.state.runtime, c.model))
        reason = "unload"
    else:
        await use_model(request, c.model, c.keep_alive)
        reason = "load"
    return JSONResponse(adapter.load_reply(c.model, adapter.iso_time(time.time()), chat=chat, reason=reason))


async def _run(request: Request, turn: Turn, tokens: list[int], plan: ConstraintPlan | None) -> Response:
    lm, gen = turn.lm, turn.common.gen
    if gen.num_ctx is not None and gen.num_ctx > lm.engine.n_ctx:
        log.info(
            "num_ctx %d asked for %s; its loaded context holds %d tokens",
            gen.num_ctx,
            lm.name,
            lm.engine.n_ctx,
        )
    await check_plan(lm, plan)
    default_max = request.app.state.runtime.config.max_tokens
    streams = submit_all(
        lm.engine, [adapter.engine_request(tokens, gen, lm.engine.n_ctx, plan, default_max=default_max)]
    )
    if turn.common.stream:
        return ndjson_response(_lines(turn, streams[0]))
    text, fin, events = await until_disconnect(request, _collect(streams[0]))
    reply = Reply(turn.setup, show_thinking=turn.common.think is not False)
    reply.push(text)
    reply.finish()
    whole = Step(reply.thinking, reply.content, reply.tool_calls)
    lps = [adapter.logprob_json(e) for e in events] if turn.common.logprobs else None
    final = _final(turn, fin, whole, lps, [e.token for e in events])
    return JSONResponse({**final, **await _check(turn, reply.content, fin)})


async def _check(turn: Turn, content: str, fin: FinishEvent) -> dict[str, Any]:
    return await jsonformat.schema_check(turn.common.grammar, content, complete=fin.reason == "stop")


async def _collect(stream: EventStream) -> tuple[str, FinishEvent, list[TokenEvent]]:
    text = ""
    events: list[TokenEvent] = []
    async for _, ev in merge([stream]):
        if isinstance(ev, TokenEvent):
            text += ev.text
            events.append(ev)
        elif isinstance(ev, FinishEvent):
            return text + ev.text, ev, events
        elif isinstance(ev, ErrorEvent):
            if isinstance(ev.error, LlamayError):
                raise ev.error
            raise EngineError(f"generation failed: {ev.error}")
    raise EngineError("generation ended without a finish event")  # pragma: no cover


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


async def _lines(turn: Turn, stream: EventStream) -> AsyncIterator[bytes]:
    reply = Reply(turn.setup, show_thinking=turn.common.think is not False)
    generated: list[int] = []
    async for _, ev in merge([stream]):
        if isinstance(ev, TokenEvent):
            generated.append(ev.token)
            step = reply.push(ev.text)
            lps = [adapter.logprob_json(ev)] if turn.common.logprobs else None
            if step or lps:
                yield ndjson_line(_chunk(turn, step, lps))
        elif isinstance(ev, FinishEvent):
            tail, last = reply.push(ev.text), reply.finish()
            step = Step(
                tail.thinking + last.thinking, tail.content + last.content, tail.tool_calls + last.tool_calls
            )
            if step:
                yield ndjson_line(_chunk(turn, step, None))
            final = _final(turn, ev, Step(), None, generated)
            yield ndjson_line({**final, **await _check(turn, reply.content, ev)})
        else:
            yield ndjson_line({"error": f"generation failed: {ev.error}"})
            return

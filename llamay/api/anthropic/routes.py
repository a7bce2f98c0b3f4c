"""Anthropic Messages API routes: POST /v1/messages (whole or streamed with Anthropic's
SSE events) and POST /v1/messages/count_tokens, on the shared chat pipeline. Every
LlamayError raised here is answered in Anthropic's error shape."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ...chat.defaults import sampling_defaults
from ...chat.flow import ChatOptions
from ...chat.pipeline import Choice, Delta, Done, Generation, Prompt, RunSpec, chat_prompt, start
from ...engine.scheduler import common_prefix
from ...errors import EngineError, LlamayError, ModelNotFound
from ...runtime import LoadedModel
from ..errors import error_body, error_response
from ..http import json_response, read_json, sse_response, until_disconnect
from ..state import state_of
from . import adapter
from .blocks import BlockAssembler
from .content import MARK
from .schemas import MessagesRequest, parse_messages_request

__all__ = ["anthropic_routes", "create_message", "count_tokens"]

Handler = Callable[[Request], Awaitable[Response]]
log = logging.getLogger("llamay.api")
CLAUDE = "claude-"


async def _model(request: Request, name: str) -> LoadedModel:
    """The model `name` ("" is the default), loaded on demand when the runtime can. An
    Anthropic model id ("claude-...") that names no model here means the default, so code
    written for Anthropic runs unchanged; any other unknown name is ModelNotFound (404)."""
    runtime = state_of(request).runtime
    use = getattr(runtime, "use", None)
    try:
        lm: LoadedModel = await use(name) if use is not None else runtime.get(name)
    except ModelNotFound:
        if not name.startswith(CLAUDE):
            raise
        lm = await use("") if use is not None else runtime.get("")
    return lm


def render(lm: LoadedModel, opts: ChatOptions, prefill: str | None) -> Prompt:
    """The prompt of a request: the chat pipeline's, plus a prefill the reply continues."""
    return chat_prompt(lm, opts, prefill or "")


def breakpoint_tokens(lm: LoadedModel, req: MessagesRequest, tokens: list[int]) -> int:
    """How many of `tokens` come before the end of the last cache breakpoint (0 without
    one): the prompt rendered with MARK there, cut at MARK, tokenized and matched."""
    if req.marked is None:
        return 0
    text = render(lm, *req.marked).text or ""
    at = text.find(MARK)
    if at < 0:  # the template dropped the marked block (an old turn's thinking, say)
        return 0
    prefix = lm.model.tokenize(text[:at], add_special=True, parse_special=True)
    return common_prefix(prefix, tokens)


@dataclass
class _Run:
    """One generation's bookkeeping: the text released, the raw token bytes (to tell which
    stop sequence matched) and the blocks built so far."""

    stops: tuple[str, ...]
    blocks: BlockAssembler
    released: str = ""
    raw: bytes = b""

    def delta(self, step: Delta) -> list[dict[str, object]]:
        if step.token is not None:
            self.released += step.token.text
            self.raw += step.token.token_bytes
        return self.blocks.push(step.pieces)

    def done(self, step: Done) -> tuple[list[dict[str, object]], str, str | None]:
        """Events closing the content, the stop reason and the stop sequence; raises
        EngineError when the engine could not complete the reply."""
        fin = step.choice.finish
        if fin.reason not in ("stop", "length", "tool_calls"):
            raise EngineError(fin.message or f"generation ended early ({fin.reason})")
        self.released += fin.text
        events = self.blocks.push(step.pieces) + self.blocks.close()
        seq = adapter.matched_stop(self.raw, self.released, self.stops) if fin.reason == "stop" else None
        reason = adapter.stop_reason(fin, tool_use=self.blocks.has_tool_use, stop_sequence=seq)
        return events, reason, seq if reason == "stop_sequence" else None


async def create_message(request: Request) -> Response:
    runtime = state_of(request).runtime
    # Parsing compiles schemas and tool specs: CPU work, off the event loop.
    req = await asyncio.to_thread(parse_messages_request, await read_json(request))
    lm = await _model(request, req.model)
    req = req.with_defaults(await sampling_defaults(runtime, lm))
    # Rendering and tokenizing are CPU work: off the event loop.
    prompt = await asyncio.to_thread(render, lm, req.options, req.prefill)
    mark = await asyncio.to_thread(breakpoint_tokens, lm, req, prompt.tokens)
    spec = RunSpec(
        sampling=req.sampling, max_tokens=req.max_tokens, stop=req.stop, default_max=runtime.config.max_tokens
    )
    gen = await start(lm, prompt, spec)
    run = _Run(req.stop, BlockAssembler(shown=req.thinking.shown))
    mid = adapter.new_message_id()
    if req.stream:
        return sse_response(_frames(mid, lm.name, len(prompt.tokens), mark, run, gen))
    choice, reason, seq = await until_disconnect(request, _collect(run, gen))
    usage = adapter.usage_json(choice.usage, mark)
    body = adapter.message_json(mid, lm.name, run.blocks.blocks, reason, seq, usage)
    return json_response({**body, **_check(choice)})


def _check(choice: Choice) -> dict[str, object]:
    """A schema not enforced in full: say so, and whether the answer satisfies it."""
    return {"schema_check": choice.check} if choice.check is not None else {}


async def _collect(run: _Run, gen: Generation) -> tuple[Choice, str, str | None]:
    async for step in gen:
        if isinstance(step, Delta):
            run.delta(step)
        else:
            _, reason, seq = run.done(step)
            return step.choice, reason, seq
    raise EngineError("generation ended without a finish event")  # pragma: no cover


async def _frames(
    mid: str, model: str, prompt_tokens: int, mark: int, run: _Run, gen: Generation
) -> AsyncIterator[bytes]:
    yield adapter.sse_event(adapter.message_start(mid, model, prompt_tokens))
    yield adapter.sse_event({"type": "ping"})
    try:
        async for step in gen:
            if isinstance(step, Delta):
                for event in run.delta(step):
                    yield adapter.sse_event(event)
                continue
            events, reason, seq = run.done(step)
            for event in events:
                yield adapter.sse_event(event)
            usage = adapter.usage_json(step.choice.usage, mark)
            yield adapter.sse_event({**adapter.message_delta(reason, seq, usage), **_check(step.choice)})
            yield adapter.sse_event({"type": "message_stop"})
    except LlamayError as exc:
        yield adapter.sse_event(error_body(exc, "anthropic"))
    finally:
        gen.close()


async def count_tokens(request: Request) -> Response:
    req = await asyncio.to_thread(
        lambda body: parse_messages_request(body, counting=True), await read_json(request)
    )
    lm = await _model(request, req.model)
    prompt = await asyncio.to_thread(render, lm, req.options, req.prefill)
    return json_response({"input_tokens": len(prompt.tokens)})


def _anthropic_errors(handler: Handler) -> Handler:
    """Answer a LlamayError from `handler` in Anthropic's shape and status."""

    async def run(request: Request) -> Response:
        rid = "req_" + secrets.token_hex(12)
        try:
            response = await handler(request)
        except LlamayError as exc:
            response = error_response(request, exc, "anthropic", {"request_id": rid})
        response.headers["request-id"] = rid
        return response

    return run


def anthropic_routes() -> list[Route]:
    return [
        Route("/v1/messages", _anthropic_errors(create_message), methods=["POST"]),
        Route("/v1/messages/count_tokens", _anthropic_errors(count_tokens), methods=["POST"]),
    ]

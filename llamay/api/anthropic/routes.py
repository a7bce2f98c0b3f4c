"""Anthropic Messages API routes: POST /v1/messages (whole or streamed with Anthropic's
SSE events) and POST /v1/messages/count_tokens, on the shared chat pipeline. Every
LlamayError raised here is answered in Anthropic's error shape."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ...engine.client import EventStream, submit_all
from ...engine.request import GenerateRequest
from ...errors import EngineError, LlamayError, ModelNotFound
from ...runtime import LoadedModel
from ...types import ErrorEvent, FinishEvent, StopSpec, TokenEvent
from .. import jsonformat
from ..chatflow import ChatOptions, ChatOutput, ChatSetup, prepare_chat
from ..http import json_response, read_json, sse_response, until_disconnect
from ..ollama.common import sampling_defaults
from ..openai.common import check_plan
from . import adapter
from .blocks import BlockAssembler
from .cache import common_prefix
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
    runtime = request.app.state.runtime
    use = getattr(runtime, "use", None)
    try:
        lm: LoadedModel = await use(name) if use is not None else runtime.get(name)
    except ModelNotFound:
        if not name.startswith(CLAUDE):
            raise
        lm = await use("") if use is not None else runtime.get("")
    return lm


def render(lm: LoadedModel, opts: ChatOptions, prefill: str | None) -> ChatSetup:
    """The prompt of a request: the chat pipeline's, plus a prefill the reply continues."""
    setup = prepare_chat(lm, opts)
    if prefill:
        setup.text += prefill
        setup.tokens = lm.model.tokenize(setup.text, add_special=True, parse_special=True)
    return setup


def breakpoint_tokens(lm: LoadedModel, req: MessagesRequest, tokens: list[int]) -> int:
    """How many of `tokens` come before the end of the last cache breakpoint (0 without
    one): the prompt rendered with MARK there, cut at MARK, tokenized and matched."""
    if req.marked is None:
        return 0
    text = render(lm, *req.marked).text
    at = text.find(MARK)
    if at < 0:  # the template dropped the marked block (an old turn's thinking, say)
        return 0
    prefix = lm.model.tokenize(text[:at], add_special=True, parse_special=True)
    return common_prefix(prefix, tokens)


@dataclass
class _Run:
    """One generation's bookkeeping: the text released, the raw token bytes (to tell which
    stop sequence matched) and the blocks built so far."""

    setup: ChatSetup
    stops: tuple[str, ...]
    blocks: BlockAssembler
    released: str = ""
    raw: bytes = b""
    out: ChatOutput = field(init=False)

    def __post_init__(self) -> None:
        self.out = self.setup.output()

    def token(self, ev: TokenEvent) -> list[dict[str, object]]:
        self.released += ev.text
        self.raw += ev.token_bytes
        return self.blocks.push(self.out.push(ev.text))

    def finish(self, fin: FinishEvent) -> tuple[list[dict[str, object]], str, str | None]:
        """Events closing the content, the stop reason and the stop sequence; raises
        EngineError when the engine could not complete the reply."""
        if fin.reason not in ("stop", "length", "tool_calls"):
            raise EngineError(fin.message or f"generation ended early ({fin.reason})")
        self.released += fin.text
        events = self.blocks.push(self.out.push(fin.text) + self.out.finish()) + self.blocks.close()
        seq = adapter.matched_stop(self.raw, self.released, self.stops) if fin.reason == "stop" else None
        reason = adapter.stop_reason(fin, tool_use=self.blocks.has_tool_use, stop_sequence=seq)
        return events, reason, seq if reason == "stop_sequence" else None


async def create_message(request: Request) -> Response:
    req = parse_messages_request(await read_json(request))
    lm = await _model(request, req.model)
    req = req.with_defaults(await asyncio.to_thread(sampling_defaults, request.app.state.runtime, lm))
    setup = render(lm, req.options, req.prefill)
    await check_plan(lm, setup.plan)
    mark = breakpoint_tokens(lm, req, setup.tokens)
    assert req.max_tokens is not None
    stop = StopSpec(
        max_tokens=min(req.max_tokens, max(1, lm.engine.n_ctx - len(setup.tokens))), stop=req.stop
    )
    gen = GenerateRequest(tokens=setup.tokens, sampling=req.sampling, stop=stop, constraint=setup.plan)
    [stream] = submit_all(lm.engine, [gen])
    run = _Run(setup, req.stop, BlockAssembler(shown=req.thinking.shown))
    mid = adapter.new_message_id()
    if req.stream:
        return sse_response(_frames(req, mid, lm.name, len(setup.tokens), mark, run, stream))
    fin = await until_disconnect(request, _collect(run, stream))
    _, reason, seq = run.finish(fin)
    usage = adapter.usage_json(fin.usage, mark)
    body = adapter.message_json(mid, lm.name, run.blocks.blocks, reason, seq, usage)
    return json_response({**body, **await _check(req, run, fin)})


async def _check(req: MessagesRequest, run: _Run, fin: FinishEvent) -> dict[str, object]:
    return await jsonformat.schema_check(req.options.grammar, run.out.content, complete=fin.reason == "stop")


async def _collect(run: _Run, stream: EventStream) -> FinishEvent:
    try:
        async for ev in stream:
            if isinstance(ev, TokenEvent):
                run.token(ev)
            elif isinstance(ev, FinishEvent):
                return ev
            elif isinstance(ev, ErrorEvent):
                raise (
                    ev.error
                    if isinstance(ev.error, LlamayError)
                    else EngineError(f"generation failed: {ev.error}")
                )
    finally:
        stream.close()
    raise EngineError("generation ended without a finish event")


async def _frames(
    req: MessagesRequest, mid: str, model: str, prompt_tokens: int, mark: int, run: _Run, stream: EventStream
) -> AsyncIterator[bytes]:
    yield adapter.sse_event(adapter.message_start(mid, model, prompt_tokens))
    yield adapter.sse_event({"type": "ping"})
    try:
        async for ev in stream:
            if isinstance(ev, TokenEvent):
                for event in run.token(ev):
                    yield adapter.sse_event(event)
            elif isinstance(ev, FinishEvent):
                events, reason, seq = run.finish(ev)
                for event in events:
                    yield adapter.sse_event(event)
                usage = adapter.usage_json(ev.usage, mark)
                yield adapter.sse_event(
                    {**adapter.message_delta(reason, seq, usage), **await _check(req, run, ev)}
                )
                yield adapter.sse_event({"type": "message_stop"})
            elif isinstance(ev, ErrorEvent):
                raise (
                    ev.error
                    if isinstance(ev.error, LlamayError)
                    else EngineError(f"generation failed: {ev.error}")
                )
    except LlamayError as exc:
        yield adapter.sse_event(adapter.error_body(exc))
    finally:
        stream.close()


async def count_tokens(request: Request) -> Response:
    req = parse_messages_request(await read_json(request), counting=True)
    lm = await _model(request, req.model)
    return json_response({"input_tokens": len(render(lm, req.options, req.prefill).tokens)})


def _anthropic_errors(handler: Handler) -> Handler:
    """Answer a LlamayError from `handler` in Anthropic's shape and status."""

    async def run(request: Request) -> Response:
        rid = "req_" + secrets.token_hex(12)
        try:
            response = await handler(request)
        except LlamayError as exc:
            if exc.status >= 500:
                log.error("%s %s failed: %s", request.method, request.url.path, exc.message)
            body = {**adapter.error_body(exc), "request_id": rid}
            response = JSONResponse(body, adapter.error_status(exc), adapter.error_headers(exc))
        response.headers["request-id"] = rid
        return response

    return run


def anthropic_routes() -> list[Route]:
    return [
        Route("/v1/messages", _anthropic_errors(create_message), methods=["POST"]),
        Route("/v1/messages/count_tokens", _anthropic_errors(count_tokens), methods=["POST"]),
    ]

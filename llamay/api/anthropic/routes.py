"""Anthropic Messages API routes: POST /v1/messages (whole or streamed with Anthropic's
SSE events) and POST /v1/messages/count_tokens, on the shared chat pipeline. Every
LlamayError raised here is answered in Anthropic's error shape."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ...chat.pipeline import run
from ...chat.prepare import ChatInput, Job, Marked, ModelRef, prepare
from ...chat.prepare import count_tokens as count_prompt
from ...errors import LlamayError
from ..errors import error_response
from ..http import json_response, read_json, respond
from ..state import state_of
from . import adapter
from .adapter import MessageRenderer
from .content import MARK
from .schemas import MessagesRequest, parse_messages_request

__all__ = ["anthropic_routes", "create_message", "count_tokens", "message_job"]

Handler = Callable[[Request], Awaitable[Response]]
CLAUDE = "claude-"


def message_job(req: MessagesRequest, *, counting: bool = False) -> Job:
    """The pipeline's job for a Messages request. An Anthropic model id ("claude-...")
    that names no model here means the default, so code written for Anthropic runs
    unchanged; any other unknown name is ModelNotFound (404). The prompt's `mark` counts
    its tokens up to the last cache breakpoint (not when `counting`)."""
    fallback = "" if req.model.startswith(CLAUDE) else None
    marked = None
    if req.marked is not None and not counting:
        marked = Marked(req.marked[0], req.marked[1] or "", MARK)
    prompt = ChatInput(req.options, req.prefill or "", marked=marked)
    return Job(ModelRef(req.model, fallback=fallback), (prompt,), req.knobs)


async def create_message(request: Request) -> Response:
    # Parsing compiles schemas and tool specs: CPU work, off the event loop.
    req = await asyncio.to_thread(parse_messages_request, await read_json(request))
    ready = await prepare(state_of(request).runtime, message_job(req))
    gen = run(ready)
    (prompt,) = ready.prompts
    renderer = MessageRenderer(
        adapter.new_message_id(),
        ready.lm.name,
        streaming=req.stream,
        stops=req.stop,
        shown=req.thinking.shown,
        mark=prompt.mark,
        prompt_tokens=len(prompt.tokens),
    )
    return await respond(request, gen, renderer)


async def count_tokens(request: Request) -> Response:
    req = await asyncio.to_thread(
        lambda body: parse_messages_request(body, counting=True), await read_json(request)
    )
    n = await count_prompt(state_of(request).runtime, message_job(req, counting=True))
    return json_response({"input_tokens": n})


def _anthropic_errors(handler: Handler) -> Handler:
    """Answer a LlamayError from `handler` in Anthropic's shape and status, and give
    every response a request id."""

    async def serve(request: Request) -> Response:
        rid = "req_" + secrets.token_hex(12)
        try:
            response = await handler(request)
        except LlamayError as exc:
            response = error_response(request, exc, "anthropic", {"request_id": rid})
        response.headers["request-id"] = rid
        return response

    return serve


def anthropic_routes() -> list[Route]:
    return [
        Route("/v1/messages", _anthropic_errors(create_message), methods=["POST"]),
        Route("/v1/messages/count_tokens", _anthropic_errors(count_tokens), methods=["POST"]),
    ]

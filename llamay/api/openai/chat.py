"""POST /v1/chat/completions: parse -> the chat pipeline -> OpenAI's shapes."""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import Response

from ...chat.pipeline import Generation, Prepared, run
from ...chat.prepare import ChatInput, Job, ModelRef, prepare
from ..http import read_json, respond
from ..sessions import held_context
from ..state import state_of
from . import adapter
from .adapter import ChatRenderer
from .schemas import ChatRequest, parse_chat

__all__ = ["chat_completions", "chat_job", "submit"]


def chat_job(req: ChatRequest) -> Job:
    """The pipeline's job for a parsed chat request."""
    common = req.common
    return Job(
        ModelRef(common.model),
        (ChatInput(req.options, untemplated="refuse", template=req.template),),
        common.knobs(keep_tokens=req.logprobs),
    )


async def submit(request: Request, ready: Prepared, session: str | None) -> Generation:
    """Run the prepared job: on the server-held context `session` names, reserved for it
    (`llamay_session`), or on its own."""
    if session is None:
        return run(ready)
    async with held_context(request, ready.lm, session) as held:
        return run(ready, held=held)


async def chat_completions(request: Request) -> Response:
    # Parsing compiles schemas and tool specs: CPU work, off the event loop.
    req = await asyncio.to_thread(parse_chat, await read_json(request))
    ready = await prepare(state_of(request).runtime, chat_job(req))
    gen = await submit(request, ready, req.common.session)
    renderer = ChatRenderer(
        adapter.new_id("chatcmpl"),
        ready.lm.name,
        streaming=req.common.stream,
        include_usage=req.common.include_usage,
        logprobs=req.logprobs,
    )
    return await respond(request, gen, renderer)

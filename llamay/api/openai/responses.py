"""The Responses API: POST /v1/responses, GET and DELETE /v1/responses/{id}, GET
/v1/responses/{id}/input_items. Parse -> the chat pipeline -> `ResponseBuilder`.

A stored response is a server-held context. A new turn with `previous_response_id` forks
the previous response's context and runs on the fork, so only its new tokens are computed
(`usage.input_tokens_details.cached_tokens`) and the previous context stays as it was for
any other branch; the fork, holding the new prompt and reply, becomes the new response's
context. A first turn keeps its prompt and reply as a new context. When the conversation
no longer extends what the context holds (a template that rewrites past turns), the turn
runs without it. `store: false` keeps nothing."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator
from dataclasses import dataclass, replace
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ...chat.defaults import sampling_defaults
from ...chat.flow import ChatOptions, with_finish_default
from ...chat.pipeline import Choice, Delta, Generation, NewContext, Prompt, RunSpec, chat_prompt, start
from ...errors import Conflict, InvalidRequest, LlamayError, TooManyRequests
from ...kv.contexts import ContextRecord
from ...runtime import LoadedModel, Runtime
from ..authn import principal_of
from ..http import json_response, read_json, sse_response, until_disconnect
from ..state import state_of
from ..tenancy import contexts_of, enforce_quota, owner_check, single_user
from .responses_render import ResponseBuilder, base_json
from .responses_schema import ResponsesRequest, conversation_messages, item_id, parse_responses
from .responses_store import ResponseStore, StoredResponse, page

__all__ = ["responses_routes", "store_of"]


def store_of(request: Request) -> ResponseStore:
    """The app's response store."""
    return state_of(request).responses


@dataclass
class Turn:
    """One response being made: where it runs and what to keep when it ends."""

    request: Request
    req: ResponsesRequest
    lm: LoadedModel
    builder: ResponseBuilder
    items: list[dict[str, Any]]
    gen: Generation | None = None
    fork: str | None = None  # the previous response's context, forked for this turn
    keep: bool = True  # keep a context for the response (stored, and within the caller's quota)
    settled: bool = False

    @property
    def store(self) -> ResponseStore:
        return store_of(self.request)

    async def finished(self, response: dict[str, Any], choice: Choice) -> None:
        """Keep the response (if stored) and its context."""
        self.settled = True
        kept = choice.reason in ("stop", "length")  # the engine keeps a context for these
        context = self.fork if self.fork is not None else choice.finish.extra.get("context_id")
        if not self.keep or not kept:
            if isinstance(context, str):
                await self.store.drop_context(context)
            context = None
        if self.req.store:
            owner = principal_of(self.request).owner_tag(single_user(self.request))
            rec = StoredResponse(response["id"], owner, self.lm.name, response, self.items,
                                 context if isinstance(context, str) else None)  # fmt: skip
            await self.store.put(rec)

    def abandon(self) -> None:
        """The turn ended without a response (an error, a client gone): free its fork."""
        if self.gen is not None:
            self.gen.close()
        if not self.settled and self.fork is not None:
            self.settled = True
            self.store.later(self.store.drop_context(self.fork))


async def create_response(request: Request) -> Response:
    runtime: Runtime = state_of(request).runtime
    body = await read_json(request)
    # Off the event loop: parsing compiles the tools' and the format's schemas.
    req = await asyncio.to_thread(parse_responses, body)
    store = store_of(request)
    principal = principal_of(request)
    prev = None
    if req.previous_response_id is not None:
        prev = store.get(req.previous_response_id, principal, param="previous_response_id")
    lm = await runtime.use(req.model or (prev.model if prev is not None else ""))
    sampling = req.sampling.with_defaults(await sampling_defaults(runtime, lm), req.sampling_given)
    req = replace(req, sampling=sampling)
    # The conversation: earlier turns' input and output items, then this input.
    items = (prev.items + prev.body["output"] if prev is not None else []) + req.items
    messages = [{"role": "system", "content": req.instructions}] if req.instructions else []
    messages += conversation_messages(items)
    if not messages:
        raise InvalidRequest("'input' must hold at least one item", param="input")
    opts = ChatOptions(
        messages=messages,
        # With tool_choice "none" the tools are neither rendered nor parsed for: a reply
        # (JSON under text.format, say) is all content.
        tools=req.tools if req.tool_choice.mode != "none" else [],
        tool_choice=req.tool_choice,
        parallel_tool_calls=req.parallel_tool_calls,
        grammar=req.grammar,
        thinking=req.thinking,
    )
    spec = RunSpec(sampling=sampling, max_tokens=req.max_output_tokens, default_max=runtime.config.max_tokens)
    model_name = req.model or lm.name
    builder = ResponseBuilder(base_json(item_id("resp"), model_name, req), summary=req.summary is not None)
    turn = Turn(request, req, lm, builder, items)
    try:
        # Rendering and tokenizing a long conversation is seconds of work: not on the loop.
        prompt = await asyncio.to_thread(
            chat_prompt, lm, with_finish_default(opts, runtime.config.finish_tool)
        )
        await _start(
            turn, prompt, spec, prev.context_id if prev is not None and prev.model == lm.name else None
        )
    except LlamayError as exc:
        if exc.param == "messages":  # the chat layer's name for what this API calls input
            exc.param = "input"
        raise
    if req.stream:
        return sse_response(_Stream(turn))
    try:
        response = await until_disconnect(request, _collect(turn))
    finally:
        turn.abandon()
    return json_response(response)


async def _start(turn: Turn, prompt: Prompt, spec: RunSpec, previous: str | None) -> None:
    """Submit the turn: on a fork of the previous response's context when it has one and
    the prompt extends it, else on its own (kept as a new context when stored)."""
    lm, service = turn.lm, contexts_of(turn.request)
    check = owner_check(turn.request)
    turn.keep = turn.req.store and await _within_quota(turn.request, len(prompt.tokens))
    if previous is not None:
        forks: list[ContextRecord] = []
        with contextlib.suppress(LlamayError):  # deleted through /v1/contexts meanwhile: compute it all
            _, forks = await service.fork(previous, 1, check)
        for fork in forks:
            try:
                async with service.reserve(lm, fork.id, check) as held:
                    turn.gen = await start(lm, prompt, spec, held=held)
                turn.fork = fork.id
                return
            except (Conflict, InvalidRequest) as exc:
                await turn.store.drop_context(fork.id)
                if isinstance(exc, InvalidRequest) and exc.param != "llamay_session":
                    raise
            except BaseException:
                await turn.store.drop_context(fork.id)
                raise
    owner = principal_of(turn.request).owner_tag(single_user(turn.request))
    keep = NewContext(owner) if turn.keep else None
    turn.gen = await start(lm, prompt, spec, new_context=keep)


async def _within_quota(request: Request, tokens: int) -> bool:
    """Whether the caller's context quota has room for this response's context. Past it
    the response is still answered and stored, only without a context: a later turn on
    it is computed whole. (A fork made to continue from a previous response is dropped
    when the turn ends, so it is not priced.)"""
    try:
        await enforce_quota(request, contexts=1, tokens=tokens)
    except TooManyRequests:
        return False
    return True


async def _collect(turn: Turn) -> dict[str, Any]:
    assert turn.gen is not None
    async for step in turn.gen:
        if isinstance(step, Delta):
            turn.builder.push(step.pieces)
            continue
        response, _ = turn.builder.finish(step.choice, step.pieces)
        await turn.finished(response, step.choice)
        return response
    raise InvalidRequest("the generation ended without an answer")  # pragma: no cover


class _Stream:
    """The event stream, closable before it started: the response may end (a client gone
    at once) before its first frame, and the turn must be abandoned then too."""

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.frames = _events(turn)

    def __aiter__(self) -> _Stream:
        return self

    async def __anext__(self) -> bytes:
        return await self.frames.__anext__()

    async def aclose(self) -> None:
        await self.frames.aclose()
        self.turn.abandon()


def _frame(event: dict[str, Any]) -> bytes:
    data = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
    return f"event: {event['type']}\ndata: {data}\n\n".encode()


async def _events(turn: Turn) -> AsyncGenerator[bytes, None]:
    """The stream; an engine error after it began is one `error` event, and leaving early
    closes the generation (which frees its KV) and drops the turn's fork."""
    assert turn.gen is not None
    builder = turn.builder
    try:
        for event in builder.start():
            yield _frame(event)
        async for step in turn.gen:
            if isinstance(step, Delta):
                for event in builder.push(step.pieces):
                    yield _frame(event)
                continue
            response, last = builder.finish(step.choice, step.pieces)
            await turn.finished(response, step.choice)
            for event in last:
                yield _frame(event)
            return
    except LlamayError as exc:
        yield _frame(builder.error_event(exc.message, exc.code, exc.param))
    finally:
        turn.abandon()


async def get_response(request: Request) -> Response:
    rec = store_of(request).get(request.path_params["rid"], principal_of(request))
    return json_response(rec.body)


async def delete_response(request: Request) -> Response:
    rid = request.path_params["rid"]
    await store_of(request).delete(rid, principal_of(request))
    return json_response({"id": rid, "object": "response.deleted", "deleted": True})


async def input_items(request: Request) -> Response:
    rec = store_of(request).get(request.path_params["rid"], principal_of(request))
    q = request.query_params
    return json_response(page(rec.items, limit=q.get("limit"), order=q.get("order"), after=q.get("after")))


def responses_routes() -> list[Route]:
    return [
        Route("/v1/responses", create_response, methods=["POST"]),
        Route("/v1/responses/{rid}", get_response, methods=["GET"]),
        Route("/v1/responses/{rid}", delete_response, methods=["DELETE"]),
        Route("/v1/responses/{rid}/input_items", input_items, methods=["GET"]),
    ]

"""The Responses API: POST /v1/responses, GET and DELETE /v1/responses/{id}, GET
/v1/responses/{id}/input_items. Parse -> the chat pipeline -> `ResponseBuilder`.

A stored response is a server-held context. A new turn with `previous_response_id` forks
the previous response's context and runs on the fork, so only its new tokens are computed
(`usage.input_tokens_details.cached_tokens`) and the previous context stays as it was for
any other branch; the fork, holding the new prompt and reply, becomes the new response's
context. A first turn keeps its prompt and reply as a new context. When the conversation
no longer extends what the context holds (a template that rewrites past turns, or
`truncation: "auto"` dropping the oldest items), the turn runs without it. `store: false`
keeps nothing. `item_reference` inputs name items of the caller's own stored responses.
A `file_search` tool searches the server's index before the model runs
(responses_search.py)."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field, replace
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ...chat.flow import ChatOptions
from ...chat.pipeline import Choice, Generation, NewContext, Prepared, run
from ...chat.prepare import ChatInput, Job, Knobs, ModelRef, count_tokens, lookup, prepare
from ...errors import Conflict, InvalidRequest, LlamayError, NotFound, TooManyRequests
from ...kv.contexts import ContextRecord
from ...runtime import LoadedModel
from ..authn import principal_of
from ..http import json_response, read_json, respond
from ..state import state_of
from ..tenancy import contexts_of, enforce_quota, owner_check, single_user
from .responses_render import ResponseBuilder, ResponseRenderer, base_json
from .responses_schema import ResponsesRequest, conversation_messages, item_id, parse_responses
from .responses_search import call_item, query_of, result_json, search, search_point
from .responses_store import ResponseStore, StoredResponse, page, stored_size

__all__ = ["responses_routes", "store_of"]


def store_of(request: Request) -> ResponseStore:
    """The app's response store."""
    return state_of(request).responses


@dataclass
class Turn:
    """One response being made: where it runs and what to keep when it ends. The driver
    (chat/pipeline.py) closes the generation; `abandon` frees what only the turn holds."""

    request: Request
    req: ResponsesRequest
    lm: LoadedModel
    builder: ResponseBuilder
    items: list[dict[str, Any]]
    gen: Generation | None = None
    fork: str | None = None  # the previous response's context, forked for this turn
    keep: bool = True  # keep a context for the response (stored, and within the caller's quota)
    settled: bool = False
    passages: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # file searches', kept

    @property
    def store(self) -> ResponseStore:
        return store_of(self.request)

    async def finished(self, response: dict[str, Any] | None, choice: Choice) -> None:
        """Keep the response (if stored) and its context."""
        assert response is not None
        self.settled = True
        kept = choice.reason in ("stop", "length")  # the engine keeps a context for these
        context = self.fork if self.fork is not None else choice.finish.extra.get("context_id")
        if not self.keep or not kept:
            if isinstance(context, str):
                await self.store.drop_context(context)
            context = None
        if self.req.store:
            owner = principal_of(self.request).owner_tag(single_user(self.request))
            size = await asyncio.to_thread(stored_size, self.items, response, self.passages)
            rec = StoredResponse(response["id"], owner, self.lm.name, response, self.items,
                                 context if isinstance(context, str) else None, size,
                                 passages=self.passages)  # fmt: skip
            await self.store.put(rec)

    def abandon(self) -> None:
        """The turn ended without a response (an error, a client gone): free its fork."""
        if not self.settled and self.fork is not None:
            self.settled = True
            self.store.later(self.store.drop_context(self.fork))


def _job(req: ResponsesRequest, model: str, messages: list[dict[str, Any]]) -> Job:
    opts = ChatOptions(
        messages=messages,
        # With tool_choice "none" the tools are neither rendered nor parsed for: a reply
        # (JSON under text.format, say) is all content.
        tools=req.tools if req.tool_choice.mode != "none" else [],
        tool_choice=req.tool_choice,
        parallel_tool_calls=req.parallel_tool_calls,
        grammar=req.grammar,
        thinking=req.thinking,
        effort=req.effort if req.effort != "none" else None,
    )
    knobs = Knobs(sampling=req.sampling, given=req.sampling_given, max_tokens=req.max_output_tokens)
    return Job(ModelRef(model), (ChatInput(opts),), knobs)


def _messages(req: ResponsesRequest, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    messages = [{"role": "system", "content": req.instructions}] if req.instructions else []
    return messages + conversation_messages(items)


def resolve(
    items: list[dict[str, Any]],
    store: ResponseStore,
    owner: str | None,
    passages: dict[str, list[dict[str, Any]]] | None = None,
) -> list[dict[str, Any]]:
    """`items` with each `item_reference` replaced by the item it names, an input or
    output item of one of the caller's own stored responses (404 naming the reference
    when there is none). A file_search_call so named brings the passages its search found
    into `passages`."""
    out = []
    for item in items:
        if item["type"] != "item_reference":
            out.append(item)
            continue
        found = store.item(owner, item["id"])
        if found is None:
            where = f"{item['param']}.id"
            raise NotFound(f"'{where}': no item '{item['id']}' in your stored responses", param=where)
        found_passages = store.passages(owner, item["id"]) if found["type"] == "file_search_call" else None
        if found_passages is not None and passages is not None:
            passages[item["id"]] = found_passages
        out.append(found)
    return out


async def _fitting(request: Request, req: ResponsesRequest, model: str, items: list[dict[str, Any]]) -> Job:
    """The job for `items`; with `truncation` "auto", for the fewest items dropped from
    the start (a turn starts at a user or system message, so no call loses its output)
    that leave the context room to answer. When even the last turn does not fit, the whole
    input goes, and is refused as without truncation."""
    whole = _job(req, model, _messages(req, items))
    if req.truncation != "auto":
        return whole
    runtime = state_of(request).runtime
    lm, _ = await lookup(runtime, whole.model)

    async def fits(job: Job) -> bool:
        return await count_tokens(runtime, job) < lm.engine.n_ctx

    if await fits(whole):
        return whole
    starts = [i for i, it in enumerate(items) if i > 0 and it["type"] == "message" and it["role"] != "assistant"]
    best, lo, hi = whole, 0, len(starts) - 1
    while lo <= hi:  # the earliest start that fits: each later one is shorter
        mid = (lo + hi) // 2
        job = _job(req, model, _messages(req, items[starts[mid] :]))
        if await fits(job):
            best, hi = job, mid - 1
        else:
            lo = mid + 1
    return best


async def create_response(request: Request) -> Response:
    body = await read_json(request)
    # Off the event loop: parsing compiles the tools' and the format's schemas.
    req = await asyncio.to_thread(parse_responses, body)
    store = store_of(request)
    prev = None
    if req.previous_response_id is not None:
        prev = store.get(req.previous_response_id, principal_of(request), param="previous_response_id")
    owner = principal_of(request).owner_tag(single_user(request))
    passages = dict(prev.passages) if prev is not None else {}
    req = replace(req, items=resolve(req.items, store, owner, passages))
    # The conversation: earlier turns' input and output items, then this input.
    items = (prev.items + prev.body["output"] if prev is not None else []) + req.items
    if req.store:  # refused now rather than generated and then not kept
        store.check_size(await asyncio.to_thread(stored_size, items, {}))
    if not _messages(req, items):
        raise InvalidRequest("'input' must hold at least one item", param="input")
    found, prompt_items = await _search(request, req, items, passages)
    try:
        model = req.model or (prev.model if prev is not None else "")
        ready = await prepare(state_of(request).runtime, await _fitting(request, req, model, prompt_items))
        req = replace(req, sampling=ready.knobs.sampling)  # as it runs, for the response object
        builder = ResponseBuilder(base_json(item_id("resp"), req.model or ready.lm.name, req),
                                  summary=req.summary is not None, logprobs=req.logprobs)  # fmt: skip
        if found is not None:
            builder.add_search(found)
        turn = Turn(request, req, ready.lm, builder, items, passages=passages)
        previous = prev.context_id if prev is not None and prev.model == ready.lm.name else None
        await _start(turn, ready, previous)
    except LlamayError as exc:
        if exc.param == "messages":  # the chat layer's name for what this API calls input
            exc.param = "input"
        raise
    assert turn.gen is not None
    renderer = ResponseRenderer(builder, streaming=req.stream)

    async def settle(choice: Choice) -> None:
        await turn.finished(renderer.response, choice)

    return await respond(request, turn.gen, renderer, settle=settle, cleanup=turn.abandon)


async def _search(
    request: Request, req: ResponsesRequest, items: list[dict[str, Any]], passages: dict[str, list[dict[str, Any]]]
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """Run the turn's file search, if it has one to run: (its output item, or None; the
    conversation as the prompt shows it). The prompt's conversation holds the new search
    after the user message it searched for, and every search of earlier turns with the
    passages it found (`passages`, by item id, to which the new search is added)."""
    found = None
    at = search_point(items) if req.searching else None
    if at is not None:
        assert req.file_search is not None
        query = query_of(items[at])
        results = [result_json(h) for h in await search(request, req.file_search, query)]
        iid = item_id("fs")
        passages[iid] = results
        found = call_item(iid, query, results if "file_search_call.results" in req.include else None)
        items = [*items[: at + 1], call_item(iid, query, results), *items[at + 1 :]]
    if passages:
        items = [
            {**it, "results": passages[it["id"]]} if it["type"] == "file_search_call" and it["id"] in passages else it
            for it in items
        ]
    return found, items


async def _start(turn: Turn, ready: Prepared, previous: str | None) -> None:
    """Submit the turn: on a fork of the previous response's context when it has one and
    the prompt extends it, else on its own (kept as a new context when stored)."""
    lm, service = turn.lm, contexts_of(turn.request)
    check = owner_check(turn.request)
    turn.keep = turn.req.store and await _within_quota(turn.request, len(ready.prompts[0].tokens))
    if previous is not None:
        forks: list[ContextRecord] = []
        with contextlib.suppress(LlamayError):  # deleted through /v1/contexts meanwhile: compute it all
            _, forks = await service.fork(previous, 1, check)
        for fork in forks:
            try:
                async with service.reserve(lm, fork.id, check) as held:
                    turn.gen = run(ready, held=held)
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
    turn.gen = run(ready, new_context=keep)


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

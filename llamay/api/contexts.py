"""Server-held contexts: create, fork, list, get, delete, snapshot, restore."""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..engine.client import submit_all
from ..engine.request import GenerateRequest, SessionSpec
from ..errors import EngineError, InvalidRequest, NotFound
from ..kv.contexts import ContextRecord
from ..kv.snapshot import check_model, read_snapshot
from ..runtime import LoadedModel, Runtime
from ..types import ErrorEvent, FinishEvent, SamplingParams, StopSpec
from .authn import principal_of
from .fields import Fields
from .http import json_response, read_body, read_json

__all__ = ["context_routes", "find_context", "on_engine"]

T = TypeVar("T")
MAX_FORKS = 10_000
MAX_SNAPSHOT = 4 * 1024 * 1024 * 1024


async def on_engine(lm: LoadedModel, fn: Any) -> Any:
    """Run `fn` on the model's engine thread and await its result."""
    return await asyncio.wrap_future(lm.engine.call(fn))


async def find_context(runtime: Runtime, cid: str) -> tuple[LoadedModel, ContextRecord]:
    for lm in runtime.models():
        rec = await on_engine(lm, lambda lm=lm: lm.engine.contexts.records.get(cid))
        if rec is not None:
            return lm, rec
    raise NotFound(f"context '{cid}' not found", param="context")


def single_user(request: Request) -> bool:
    return not request.app.state.keys.enabled


async def create_context(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    f = Fields(await read_json(request))
    lm = await runtime.use(f.text("model", ""))
    marking = f.text("marking")
    tokens = _prefix_tokens(lm, f)
    principal = principal_of(request)
    spec = SessionSpec(create=True, owner=principal.owner_tag(single_user(request)), marking=marking)
    req = GenerateRequest(tokens, SamplingParams(temperature=0), StopSpec(max_tokens=0), session=spec)
    (stream,) = submit_all(lm.engine, [req])
    cid = None
    async for ev in stream:
        if isinstance(ev, FinishEvent):
            cid = ev.extra.get("context_id")
        elif isinstance(ev, ErrorEvent):
            raise EngineError(f"the context could not be computed: {ev.error}")
    if cid is None:
        raise EngineError("the context could not be computed (the KV cache is full?)")
    return json_response({"id": cid, "object": "context", "model": lm.name, "tokens": len(tokens)})


def _prefix_tokens(lm: LoadedModel, f: Fields) -> list[int]:
    messages = f.array("messages")
    prompt = f.text("prompt")
    if (messages is None) == (prompt is None):
        raise InvalidRequest("give exactly one of 'messages' or 'prompt'", param="messages")
    if prompt is not None:
        tokens = lm.model.tokenize(prompt, add_special=True, parse_special=False)
    else:
        text = lm.template.render(messages, add_generation_prompt=False)
        text = lm.template.strip_bos_eos(text, add_bos=lm.model.add_bos)
        tokens = lm.model.tokenize(text, add_special=True, parse_special=True)
    if not tokens:
        raise InvalidRequest("the context would be empty", param="prompt")
    return tokens


async def fork_context(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    lm, rec = await find_context(runtime, request.path_params["cid"])
    principal_of(request).check_owner(rec.owner, f"context '{rec.id}'")
    raw = request.query_params.get("n", "1")
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_FORKS:
        raise InvalidRequest(f"'n' must be an integer from 1 to {MAX_FORKS}", param="n")
    forks = await on_engine(lm, lambda: lm.engine.contexts.fork(rec.id, int(raw)))
    return json_response({"object": "list", "data": [{"id": r.id, "object": "context"} for r in forks]})


async def list_contexts(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    principal = principal_of(request)
    data = []
    for lm in runtime.models():
        recs = await on_engine(lm, lambda lm=lm: list(lm.engine.contexts.records.values()))
        data += [r.public(lm.name) for r in recs if principal.admin or r.owner in (None, principal.name)]
    return json_response({"object": "list", "data": data})


async def get_context(request: Request) -> Response:
    lm, rec = await find_context(request.app.state.runtime, request.path_params["cid"])
    principal_of(request).check_owner(rec.owner, f"context '{rec.id}'")
    return json_response(rec.public(lm.name))


async def delete_context(request: Request) -> Response:
    lm, rec = await find_context(request.app.state.runtime, request.path_params["cid"])
    principal_of(request).check_owner(rec.owner, f"context '{rec.id}'")
    await on_engine(lm, lambda: lm.engine.contexts.delete(rec.id))
    return json_response({"id": rec.id, "object": "context.deleted", "deleted": True})


async def snapshot_context(request: Request) -> Response:
    lm, rec = await find_context(request.app.state.runtime, request.path_params["cid"])
    principal_of(request).check_owner(rec.owner, f"context '{rec.id}'")
    data = await on_engine(lm, lambda: lm.engine.contexts.snapshot(rec))
    headers = {"Content-Disposition": f'attachment; filename="{rec.id}.llamayctx"'}
    return Response(data, media_type="application/octet-stream", headers=headers)


async def restore_context(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    data = await read_body(request, MAX_SNAPSHOT)
    header, state = read_snapshot(data)
    lm = await runtime.use(request.query_params.get("model", ""))
    check_model(header, lm.name, lm.sha256 or "")
    principal = principal_of(request)
    principal.check_owner(header.owner, "the snapshot")
    lm.model.check_tokens(header.tokens)
    if len(header.tokens) >= lm.engine.n_ctx:
        raise InvalidRequest(
            f"the snapshot holds {len(header.tokens)} tokens; this context holds {lm.engine.n_ctx}"
        )
    contexts = lm.engine.contexts
    rec = await on_engine(lm, lambda: contexts.restore(header, state, lm.engine.acquire_seq))
    return json_response({"id": rec.id, "object": "context", "model": lm.name, "tokens": len(rec.tokens)})


def context_routes() -> list[Route]:
    return [
        Route("/v1/contexts", create_context, methods=["POST"]),
        Route("/v1/contexts", list_contexts, methods=["GET"]),
        Route("/v1/contexts/restore", restore_context, methods=["POST"]),
        Route("/v1/contexts/{cid}", get_context, methods=["GET"]),
        Route("/v1/contexts/{cid}", delete_context, methods=["DELETE"]),
        Route("/v1/contexts/{cid}/fork", fork_context, methods=["POST"]),
        Route("/v1/contexts/{cid}/snapshot", snapshot_context, methods=["GET"]),
    ]

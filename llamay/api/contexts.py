"""Server-held contexts: create, fork, list, get, delete, snapshot, restore (HTTP over
the typed ContextService; ownership is checked against the caller's principal)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..errors import Forbidden, InvalidRequest
from ..runtime import LoadedModel
from .authn import principal_of
from .fields import Fields
from .http import json_response, read_json
from .restore import restore_context, snapshot_key
from .state import state_of
from .tenancy import contexts_of, enforce_quota, owner_check, single_user

__all__ = ["context_routes"]

# Forks per call without limits (the single user, admins by default); a key's limits say less.
MAX_FORKS = 10_000
PAGE = 100  # contexts a listing returns when it sets no `limit`
MAX_PAGE = 1000


async def create_context(request: Request) -> Response:
    f = Fields(await read_json(request))
    lm = await state_of(request).runtime.use(f.text("model", ""))
    marking = f.text("marking", max_bytes=state_of(request).limits.max_field)
    shared = bool(f.flag("shared", False))
    principal = principal_of(request)
    if shared and not principal.admin:
        raise Forbidden("only an admin may share a context's prefix with every tenant")
    tokens = _prefix_tokens(lm, f)
    await enforce_quota(request, contexts=1, tokens=len(tokens))
    owner = principal.owner_tag(single_user(request))
    cid = await contexts_of(request).create(lm, tokens, owner=owner, marking=marking, shared=shared)
    body = {"id": cid, "object": "context", "model": lm.name, "tokens": len(tokens), "shared": shared}
    return json_response(body)


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
    raw = request.query_params.get("n", "1")
    cid = request.path_params["cid"]
    service = contexts_of(request)
    await service.find(cid, owner_check(request))  # an unknown or foreign id first: 404 / 403
    limits = principal_of(request).limits
    most = min(MAX_FORKS, limits.forks_per_call) if limits is not None else MAX_FORKS
    if not raw.isdigit() or not 1 <= int(raw) <= most:
        raise InvalidRequest(f"'n' must be an integer from 1 to {most}", param="n")
    await enforce_quota(request, contexts=int(raw))
    _, forks = await service.fork(cid, int(raw), owner_check(request))
    return json_response({"object": "list", "data": [{"id": r.id, "object": "context"} for r in forks]})


async def list_contexts(request: Request) -> Response:
    """One page of the caller's contexts in id order: at most `limit` (1 to MAX_PAGE,
    default PAGE) with ids after `after`; `has_more` says whether another page follows. The
    cursor is an id, not a position, so it holds across deletions (and across a fleet's
    replicas, which each page their own)."""
    q = request.query_params
    raw = q.get("limit", str(PAGE))
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_PAGE:
        raise InvalidRequest(f"'limit' must be an integer from 1 to {MAX_PAGE}", param="limit")
    limit, after = int(raw), q.get("after", "")
    principal = principal_of(request)
    found = await contexts_of(request).every(
        lambda r: (principal.admin or r.owner == principal.name) and r.id > after
    )
    found.sort(key=lambda pair: pair[1].id)
    data = [r.public(lm.name) for lm, r in found[:limit]]
    return json_response({"object": "list", "data": data, "has_more": len(found) > limit,
                          "last_id": data[-1]["id"] if data else None})  # fmt: skip


async def get_context(request: Request) -> Response:
    lm, rec = await contexts_of(request).find(request.path_params["cid"], owner_check(request))
    return json_response(rec.public(lm.name))


async def delete_context(request: Request) -> Response:
    cid = request.path_params["cid"]
    await contexts_of(request).delete(cid, owner_check(request))
    return json_response({"id": cid, "object": "context.deleted", "deleted": True})


async def snapshot_context(request: Request) -> Response:
    service = contexts_of(request)
    rec, data = await service.snapshot(
        request.path_params["cid"], owner_check(request), snapshot_key(request)
    )
    headers = {"Content-Disposition": f'attachment; filename="{rec.id}.llamayctx"'}
    return Response(data, media_type="application/octet-stream", headers=headers)


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

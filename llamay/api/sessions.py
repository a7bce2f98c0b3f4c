"""Requests that continue a server-held context (`"llamay_session": "<context id>"`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.requests import Request

from ..chat.pipeline import Held
from ..errors import InvalidRequest
from ..runtime import LoadedModel
from .authn import principal_of
from .contexts import find_context, on_engine

__all__ = ["reserve_session", "held_context"]


@asynccontextmanager
async def reserve_session(request: Request, lm: LoadedModel, cid: str) -> AsyncIterator[list[int]]:
    """Reserve context `cid` for this request and yield the tokens it holds. If the body
    of the `async with` fails before the engine took the request, the reservation is
    released; once submitted, the engine releases it when the request ends."""
    owner_lm, _ = await find_context(request.app.state.runtime, cid)
    if owner_lm is not lm:
        raise InvalidRequest(
            f"context '{cid}' belongs to model '{owner_lm.name}', not '{lm.name}'", param="model"
        )
    principal = principal_of(request)
    tokens = await on_engine(
        lm,
        lambda: lm.engine.contexts.begin(
            cid, lambda rec: principal.check_owner(rec.owner, f"context '{cid}'")
        ),
    )
    try:
        yield tokens
    except BaseException:
        await on_engine(lm, lambda: lm.engine.contexts.cancel(cid))
        raise


@asynccontextmanager
async def held_context(request: Request, lm: LoadedModel, cid: str | None) -> AsyncIterator[Held | None]:
    """`reserve_session` as the pipeline's `Held` (None without a session): submit inside
    the `with`, so a reservation is released in one place if submitting fails."""
    if cid is None:
        yield None
        return
    async with reserve_session(request, lm, cid) as tokens:
        yield Held(cid, tokens)

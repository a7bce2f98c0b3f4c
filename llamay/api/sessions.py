"""Requests that continue a server-held context (`"llamay_session": "<context id>"`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.requests import Request

from ..chat.pipeline import Held
from ..runtime import LoadedModel
from .tenancy import contexts_of, owner_check

__all__ = ["held_context"]


@asynccontextmanager
async def held_context(request: Request, lm: LoadedModel, cid: str | None) -> AsyncIterator[Held | None]:
    """Context `cid` reserved for this request (None without a session), for the
    pipeline's `start`: submit inside the `with`, so that the reservation is released in
    one place if submitting fails; once submitted, the engine releases it at the end."""
    if cid is None:
        yield None
        return
    async with contexts_of(request).reserve(lm, cid, owner_check(request)) as held:
        yield held

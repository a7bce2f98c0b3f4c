"""Requests that continue a server-held context (`"llamay_session": "<context id>"`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.requests import Request

from ..errors import Conflict, InvalidRequest
from ..runtime import LoadedModel
from .authn import principal_of
from .contexts import find_context, on_engine

__all__ = ["reserve_session", "align_prompt"]


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


def align_prompt(lm: LoadedModel, held: list[int], tokens: list[int], text: str | None) -> list[int]:
    """The prompt as tokens that start with exactly `held`. A prompt whose text starts with
    the held text but tokenizes differently at the seam keeps the held tokens and
    tokenizes only the rest; a prompt that really differs is a 409 saying where."""
    if tokens[: len(held)] == held and len(tokens) > len(held):
        return tokens
    if text is not None:
        held_text = lm.model.detokenize(held)
        if text.startswith(held_text) and len(text) > len(held_text):
            return held + lm.model.tokenize(text[len(held_text) :], add_special=False, parse_special=True)
    at = next(
        (i for i, (a, b) in enumerate(zip(held, tokens, strict=False)) if a != b), min(len(held), len(tokens))
    )
    if at >= len(held):
        raise InvalidRequest("the prompt adds nothing to what the context holds", param="llamay_session")
    shown = lm.model.detokenize(held[max(0, at - 8) : at + 8])
    raise Conflict(
        f"the prompt diverges from the context at token {at} of {len(held)} (near {shown!r}); "
        "a session's prompt must start with exactly what the context holds"
    )

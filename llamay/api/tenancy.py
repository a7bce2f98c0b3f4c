"""Who may use which server-held context, and how many a tenant may keep: the checks that
context routes, snapshot restore, the Responses API and session requests share."""

from __future__ import annotations

from starlette.requests import Request

from ..chat.contexts import Check, ContextService
from ..errors import TooManyRequests
from .authn import principal_of
from .state import state_of

__all__ = ["contexts_of", "owner_check", "single_user", "enforce_quota"]


def contexts_of(request: Request) -> ContextService:
    return ContextService(state_of(request).runtime)


def owner_check(request: Request) -> Check:
    """Raises Forbidden for a context the caller's principal may not use."""
    principal = principal_of(request)
    return lambda rec: principal.check_owner(rec.owner, f"context '{rec.id}'")


def single_user(request: Request) -> bool:
    return not state_of(request).keys.enabled


async def enforce_quota(request: Request, *, contexts: int, tokens: int = 0, kv_bytes: int = 0) -> None:
    """429 (with Retry-After) when `contexts` more contexts, keeping `kv_bytes` (or `tokens`
    positions) of KV, would take the caller past its limits."""
    principal = principal_of(request)
    limits = principal.limits
    if limits is None:
        return
    held, size, per_cell = await contexts_of(request).held_by(principal.name)
    if held + contexts > limits.contexts:
        raise TooManyRequests(
            f"'{principal.name}' holds {held} contexts and may hold {limits.contexts}; delete some first",
            retry_after=30,
        )
    if size + (kv_bytes or tokens * per_cell) > limits.context_bytes:
        raise TooManyRequests(
            f"'{principal.name}' keeps {size} bytes of context KV and may keep {limits.context_bytes}; "
            "delete some contexts first",
            retry_after=30,
        )

"""What the authenticated key may do beyond using what is installed, made known to the
layers below HTTP: a pure ASGI middleware, inside the auth one, that sets
`runtime.MANAGE_MODELS` for the request from the principal's role. Without keys every
request acts as the local admin, so everything stays allowed."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from ..auth import Principal
from ..runtime import MANAGE_MODELS

__all__ = ["GrantsMiddleware", "may_manage_models"]


def may_manage_models(scope: Scope) -> bool:
    """Whether the request's principal may load, download, unload or re-time models."""
    principal = scope.get("state", {}).get("principal")
    return isinstance(principal, Principal) and principal.admin


class GrantsMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        token = MANAGE_MODELS.set(may_manage_models(scope))
        try:
            await self.app(scope, receive, send)
        finally:
            MANAGE_MODELS.reset(token)

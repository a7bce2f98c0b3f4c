"""Authentication: every route but /health needs a valid key when keys are configured.
A pure ASGI middleware (streaming responses and disconnects pass straight through); the
principal is put in `scope["state"]["principal"]`."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from ..auth import LOCAL, KeyRing, Principal, bearer_token
from ..errors import Forbidden, Unauthorized
from .errors import api_of, error_body

__all__ = ["AuthMiddleware", "principal_of"]

OPEN_PATHS = frozenset({"/health", "/openapi.json"})
# Routes that change what the server holds, or show everyone's traffic: admin keys only.
ADMIN_PATHS = frozenset(
    {
        "/api/pull",
        "/api/delete",
        "/api/create",
        "/api/copy",
        "/api/push",
        "/api/reset",
        "/api/unload",
        "/v1/stats",
        "/metrics",
    }
)


class AuthMiddleware:
    def __init__(self, app: ASGIApp, keys: KeyRing) -> None:
        self.app = app
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        if scope["path"] in OPEN_PATHS or not self.keys.enabled:
            state["principal"] = LOCAL
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            token = bearer_token(headers.get("authorization"), headers.get("x-api-key"))
            principal = self.keys.authenticate(token)
            if scope["path"] in ADMIN_PATHS and not principal.admin:
                raise Forbidden(f"{scope['path']} needs an admin key")
            state["principal"] = principal
        except (Unauthorized, Forbidden) as exc:
            await _deny(send, scope["path"], exc)
            return
        await self.app(scope, receive, send)


async def _deny(send: Send, path: str, exc: Unauthorized | Forbidden) -> None:
    body = json.dumps(_error_body(path, exc)).encode()
    headers: list[Any] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if exc.status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": exc.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _error_body(path: str, exc: Unauthorized | Forbidden) -> dict[str, Any]:
    """Each API's own error shape, so its official client reports the error properly."""
    return error_body(exc, api_of(path))


def principal_of(request: Request) -> Principal:
    p = request.scope.get("state", {}).get("principal")
    return p if isinstance(p, Principal) else LOCAL

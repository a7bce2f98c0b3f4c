"""Authentication: every route but the open ones (/health, /openapi.json, the web console
and its guide) needs a valid key when keys are configured.
A pure ASGI middleware (streaming responses and disconnects pass straight through); the
principal is put in `scope["state"]["principal"]`."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from ..auth import ANONYMOUS, CURRENT_NAMESPACE, CURRENT_PRINCIPAL, LOCAL, KeyRing, Principal, bearer_token
from ..errors import Forbidden, LlamayError, TooManyRequests, Unauthorized
from .errors import api_of, error_body
from .state import state_of

__all__ = ["AuthMiddleware", "principal_of"]

OPEN_PATHS = frozenset({"/health", "/openapi.json", "/", "/docs", "/api/docs"})
# The web console's own files: static package files with no data (the page asks for a key).
OPEN_PREFIXES = ("/web/",)
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
        self.in_flight: dict[str, int] = {}  # principal -> requests being served

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        if scope["path"] in OPEN_PATHS or scope["path"].startswith(OPEN_PREFIXES) or not self.keys.enabled:
            state["principal"] = ANONYMOUS if self.keys.enabled else LOCAL
            await self._serve(state["principal"], scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            token = bearer_token(headers.get("authorization"), headers.get("x-api-key"))
            principal = self.keys.authenticate(token)
            if scope["path"] in ADMIN_PATHS and not principal.admin:
                raise Forbidden(f"{scope['path']} needs an admin key")
            limit = principal.limits.concurrent_requests if principal.limits is not None else None
            if limit is not None and self.in_flight.get(principal.name, 0) >= limit:
                raise TooManyRequests(
                    f"'{principal.name}' has {limit} requests in flight, its limit", retry_after=1
                )
            state["principal"] = principal
        except (Unauthorized, Forbidden, TooManyRequests) as exc:
            await _deny(send, scope["path"], exc)
            return
        self.in_flight[principal.name] = self.in_flight.get(principal.name, 0) + 1
        try:
            await self._serve(principal, scope, receive, send)
        finally:
            left = self.in_flight.pop(principal.name) - 1
            if left:
                self.in_flight[principal.name] = left

    async def _serve(self, principal: Principal, scope: Scope, receive: Receive, send: Send) -> None:
        # The prefix-cache namespace and the principal (whom the engine's fair share
        # charges) follow the request into the pipeline (and the tasks it starts), so no
        # route can forget to pass them.
        token, who = CURRENT_NAMESPACE.set(principal.namespace), CURRENT_PRINCIPAL.set(principal)
        try:
            await self.app(scope, receive, send)
        finally:
            CURRENT_PRINCIPAL.reset(who)
            CURRENT_NAMESPACE.reset(token)


async def _deny(send: Send, path: str, exc: LlamayError) -> None:
    body = json.dumps(_error_body(path, exc)).encode()
    headers: list[Any] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if exc.status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    if isinstance(exc, TooManyRequests):
        headers.append((b"retry-after", str(exc.retry_after).encode()))
    await send({"type": "http.response.start", "status": exc.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _error_body(path: str, exc: LlamayError) -> dict[str, Any]:
    """Each API's own error shape, so its official client reports the error properly."""
    return error_body(exc, api_of(path))


def principal_of(request: Request) -> Principal:
    """The authenticated caller. A request that did not pass the middleware has none: with
    keys on that is a 401, never the admin (single user: the local admin, as every caller)."""
    p = request.scope.get("state", {}).get("principal")
    if isinstance(p, Principal):
        return p
    if not state_of(request).keys.enabled:
        return LOCAL
    raise Unauthorized("no authenticated principal for this request")

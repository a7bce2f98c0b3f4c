"""Request counting for /v1/stats and /metrics: a pure ASGI middleware that records each
response's route template and status."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["RequestCounter", "CountingMiddleware", "method_label"]

# Methods counted under their own name; any other string a client sends (counted before
# auth, so by anyone) shares one label, and the series stay a fixed set.
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def method_label(method: str) -> str:
    return method if method in KNOWN_METHODS else "OTHER"


class RequestCounter:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_route: Counter[tuple[str, str, int]] = Counter()
        self.in_flight = 0

    def record(self, method: str, route: str, status: int) -> None:
        with self._lock:
            self.by_route[(method, route, status)] += 1

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            items = sorted(self.by_route.items())
        return [{"method": m, "route": r, "status": s, "count": n} for (m, r, s), n in items]


class CountingMiddleware:
    def __init__(self, app: ASGIApp, counter: RequestCounter) -> None:
        self.app = app
        self.counter = counter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        route = _route_of(scope)

        async def capture(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        self.counter.in_flight += 1
        try:
            await self.app(scope, receive, capture)
        finally:
            self.counter.in_flight -= 1
            self.counter.record(method_label(scope["method"]), route, status)


def _route_of(scope: Scope) -> str:
    """The matching route's path template (so ids do not explode the label set)."""
    app = scope.get("app")
    router = getattr(app, "router", None)
    for r in getattr(router, "routes", []):
        match, _ = r.matches(scope)
        if match == Match.FULL:
            return str(getattr(r, "path", scope["path"]))
    return "(unmatched)"

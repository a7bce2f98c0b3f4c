"""The ASGI app factory. It receives its runtime; there is no module-level state."""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import __version__
from ..runtime import Runtime
from .errors import exception_handlers
from .http import json_response
from .openai.routes import openai_routes

__all__ = ["create_app", "ENDPOINTS"]

# (method, path, purpose) for the serve banner; keep in step with the routes below.
ENDPOINTS: list[tuple[str, str, str]] = [
    ("POST", "/v1/chat/completions", "chat (OpenAI), streaming with SSE"),
    ("POST", "/v1/completions", "text completion (OpenAI)"),
    ("GET", "/v1/models", "models this server holds"),
    ("GET", "/health", "liveness and engine status"),
]


async def health(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    models: list[dict[str, Any]] = [
        {
            "name": m.name,
            "running": m.engine.running,
            "waiting": m.engine.queue_depth,
            "context": m.engine.n_ctx,
            "kv_cells": m.engine.kv_used(),
            "cache_cells": m.engine.cache_used(),
            "requests": m.engine.stats.requests,
            "aborted": m.engine.stats.aborted,
        }
        for m in runtime.models()
    ]
    return json_response({"status": "ok", "version": __version__, "models": models})


def create_app(runtime: Runtime) -> Starlette:
    routes = [Route("/health", health, methods=["GET"]), *openai_routes()]
    app = Starlette(routes=routes, exception_handlers=exception_handlers())
    app.state.runtime = runtime
    return app

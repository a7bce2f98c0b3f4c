"""The ASGI app factory. It receives its runtime; there is no module-level state."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import __version__
from ..auth import KeyRing
from ..runtime import Runtime
from .admin import admin_routes
from .anthropic.routes import anthropic_routes
from .authn import AuthMiddleware
from .contexts import context_routes
from .embeddings import embeddings_routes
from .errors import exception_handlers
from .grants import GrantsMiddleware
from .http import json_response
from .metrics import CountingMiddleware, RequestCounter
from .ollama.routes import ollama_routes
from .openai.responses import responses_routes
from .openai.routes import openai_routes
from .openapi import openapi_routes
from .rag import rag_routes
from .redact import redact_routes
from .web import web_routes

__all__ = ["create_app", "ENDPOINTS"]

# (method, path, purpose) for the serve banner; keep in step with the routes below.
ENDPOINTS: list[tuple[str, str, str]] = [
    ("POST", "/v1/chat/completions", "chat (OpenAI): streaming, schemas, tools, reasoning, sessions"),
    ("POST", "/v1/completions", "text completion (OpenAI)"),
    ("POST", "/v1/responses", "Responses API (OpenAI): stored turns continue a server-held context"),
    ("GET", "/v1/models", "models (OpenAI)"),
    ("POST", "/v1/messages", "Anthropic Messages API (+ /count_tokens)"),
    ("POST", "/api/chat", "Ollama chat (+ /api/generate, tags, ps, show, pull, ...)"),
    ("POST", "/v1/embeddings", "embeddings (OpenAI; Ollama: /api/embed)"),
    ("POST", "/v1/rerank", "rerank documents for a query"),
    ("POST", "/v1/retrieve", "passages from the index the caller may read"),
    ("POST", "/v1/contexts", "compute a prefix once and keep it (server-held context)"),
    ("POST", "/v1/contexts/{id}/fork?n=N", "fork a context N ways (no KV copy)"),
    (
        "GET",
        "/v1/contexts/{id}/snapshot",
        "download a context as a file (restore: POST /v1/contexts/restore)",
    ),
    ("POST", "/v1/redact", "find and replace personal data"),
    ("GET", "/v1/stats", "traffic, tokens, queue, KV and cache figures (admin; Prometheus: /metrics)"),
    ("GET", "/", "web console (integration guide: /docs)"),
    ("GET", "/health", "liveness and engine status (OpenAPI description: /openapi.json)"),
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
            "ram_cache": m.engine.ram_cache(),
            "requests": m.engine.stats.requests,
            "aborted": m.engine.stats.aborted,
        }
        for m in runtime.models()
    ]
    return json_response({"status": "ok", "version": __version__, "models": models})


async def _reap(runtime: Runtime) -> None:
    """Unload models idle past their keep-alive."""
    while True:
        await asyncio.sleep(1.0)
        try:
            await runtime.reap()
        except Exception:  # keep reaping whatever one unload did
            logging.getLogger("llamay.runtime").exception("unloading an idle model failed")


def create_app(runtime: Runtime, keys: KeyRing | None = None) -> Starlette:
    keys = keys or KeyRing([])
    routes = [
        Route("/health", health, methods=["GET"]),
        *openai_routes(),
        *responses_routes(),
        *context_routes(),
        *anthropic_routes(),
        *ollama_routes(),
        *embeddings_routes(),
        *rag_routes(),
        *redact_routes(),
        *admin_routes(),
        *openapi_routes(),
        *web_routes(),
    ]

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        reaper = asyncio.create_task(_reap(runtime))
        yield
        reaper.cancel()
        if getattr(app.state, "responses", None) is not None:  # their records end with the process
            await app.state.responses.close()
        # Shutdown runs here, before the server process exits: engines stop and contexts
        # are written to disk.
        await asyncio.to_thread(runtime.close)
        for enc in (getattr(app.state, "encoders", None) or {}).values():
            await asyncio.to_thread(enc.close)

    app = Starlette(routes=routes, exception_handlers=exception_handlers(), lifespan=lifespan)
    app.state.runtime = runtime
    app.state.keys = keys
    app.state.encoders = {}
    app.state.index = None
    app.state.counter = RequestCounter()
    # Added first, so it runs inside the auth layer and sees the principal it found.
    app.add_middleware(GrantsMiddleware)
    app.add_middleware(AuthMiddleware, keys=keys)
    # Added last, so it runs first: it also counts the 401s the auth layer answers.
    app.add_middleware(CountingMiddleware, counter=app.state.counter)
    return app

"""The ASGI app factory. It receives its runtime; there is no module-level state."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import __version__
from ..auth import ANONYMOUS, KeyRing
from ..config import ServerLimits
from ..runtime import Runtime
from .admin import admin_routes
from .anthropic.routes import anthropic_routes
from .authn import AuthMiddleware, principal_of
from .contexts import context_routes
from .embeddings import embeddings_routes
from .errors import exception_handlers
from .grants import GrantsMiddleware
from .http import json_response
from .metrics import CountingMiddleware
from .ollama.routes import ollama_routes
from .openai.responses import responses_routes
from .openai.routes import openai_routes
from .openapi import openapi_routes
from .rag import rag_routes
from .redact import redact_routes
from .state import server_state, state_of
from .tokens import token_routes
from .variance import BatchInvariantHeader
from .web import web_routes

if TYPE_CHECKING:
    from ..embed import Encoder
    from ..rag import Index

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
    """Liveness for anyone; engine figures by role. Without a valid key (keys on): only that
    the server is up. A user key: each model's name, context size and load (running and
    waiting sequences). An admin (or the single user): also the KV and cache figures and
    request counts, which move with other tenants' prompts."""
    principal = principal_of(request)
    if principal is ANONYMOUS:
        return json_response({"status": "ok"})
    models: list[dict[str, Any]] = []
    for m in state_of(request).runtime.models():
        row: dict[str, Any] = {
            "name": m.name,
            "running": m.engine.running,
            "waiting": m.engine.queue_depth,
            "context": m.engine.n_ctx,
        }
        if principal.admin:
            row |= {
                "kv_cells": m.engine.kv_used(),
                "cache_cells": m.engine.cache_used(),
                "ram_cache": m.engine.ram_cache(),
                "requests": m.engine.stats.requests,
                "aborted": m.engine.stats.aborted,
            }
        models.append(row)
    return json_response({"status": "ok", "version": __version__, "models": models})


async def _reap(runtime: Runtime) -> None:
    """Unload models idle past their keep-alive."""
    while True:
        await asyncio.sleep(1.0)
        try:
            await runtime.reap()
        except Exception:  # keep reaping whatever one unload did
            logging.getLogger("llamay.runtime").exception("unloading an idle model failed")


def create_app(
    runtime: Runtime,
    keys: KeyRing | None = None,
    *,
    encoders: dict[str, Encoder] | None = None,
    index: Index | None = None,
    limits: ServerLimits | None = None,
    snapshot_key: bytes | None = None,
) -> Starlette:
    """The app serving `runtime`; `app.state` is its complete `ServerState` (see
    `state.server_state` for the defaults). Its lifespan reaps idle models and, at the end,
    closes the runtime and the encoders."""
    state = server_state(
        runtime, keys, encoders=encoders, index=index, limits=limits, snapshot_key=snapshot_key
    )
    routes = [
        Route("/health", health, methods=["GET"]),
        *openai_routes(),
        *responses_routes(),
        *context_routes(),
        *anthropic_routes(),
        *ollama_routes(),
        *embeddings_routes(),
        *token_routes(),
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
        await state.responses.close()  # their records end with the process
        # Shutdown runs here, before the server process exits: engines stop and contexts
        # are written to disk.
        await asyncio.to_thread(runtime.close)
        for enc in state.encoders.values():
            await asyncio.to_thread(enc.close)

    app = Starlette(routes=routes, exception_handlers=exception_handlers(), lifespan=lifespan)
    # One typed object in place of Starlette's attribute bag; Starlette itself never reads it.
    app.state = state  # type: ignore[assignment]
    # Innermost: the models a request used, reported in a response header.
    app.add_middleware(BatchInvariantHeader)
    # Added first, so it runs inside the auth layer and sees the principal it found.
    app.add_middleware(GrantsMiddleware)
    app.add_middleware(AuthMiddleware, keys=state.keys)
    # Added last, so it runs first: it also counts the 401s the auth layer answers.
    app.add_middleware(CountingMiddleware, counter=state.counter)
    return app

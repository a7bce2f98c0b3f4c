"""Ollama's native API (/api/...), so code written for Ollama runs against llamay by
changing only the host. Every route answers errors as `{"error": "message"}`."""

from __future__ import annotations

from starlette.routing import Route

from . import manage, models
from .chat import chat, generate
from .common import ollama_endpoint

__all__ = ["ollama_routes"]


def ollama_routes() -> list[Route]:
    table = [
        ("/api/chat", chat, ["POST"]),
        ("/api/generate", generate, ["POST"]),
        ("/api/tags", models.tags, ["GET"]),
        ("/api/ps", models.ps, ["GET"]),
        ("/api/show", models.show, ["POST"]),
        ("/api/version", models.version, ["GET"]),
        ("/api/copy", manage.copy, ["POST"]),
        ("/api/delete", manage.delete, ["DELETE"]),
        ("/api/pull", manage.pull, ["POST"]),
        ("/api/create", manage.create, ["POST"]),
        ("/api/push", manage.push, ["POST"]),
        ("/api/embeddings", models.embeddings, ["POST"]),
        ("/api/unload", models.unload, ["POST"]),
        ("/api/embed", models.embed, ["POST"]),
        ("/api/load", models.load, ["POST"]),
        ("/api/reset", models.reset, ["POST"]),
    ]
    return [Route(path, ollama_endpoint(fn), methods=methods) for path, fn, methods in table]

"""Ollama API routes (filled in by the Ollama adapter)."""

from __future__ import annotations

from starlette.routing import Route

__all__ = ["ollama_routes"]


def ollama_routes() -> list[Route]:
    return []

"""HTTP routes: rag."""

from __future__ import annotations

from starlette.routing import Route

__all__ = ["rag_routes"]


def rag_routes() -> list[Route]:
    return []

"""HTTP routes: embeddings."""

from __future__ import annotations

from starlette.routing import Route

__all__ = ["embeddings_routes"]


def embeddings_routes() -> list[Route]:
    return []

"""HTTP routes: redact."""

from __future__ import annotations

from starlette.routing import Route

__all__ = ["redact_routes"]


def redact_routes() -> list[Route]:
    return []

"""Anthropic Messages API routes (filled in by the Anthropic adapter)."""

from __future__ import annotations

from starlette.routing import Route

__all__ = ["anthropic_routes"]


def anthropic_routes() -> list[Route]:
    return []

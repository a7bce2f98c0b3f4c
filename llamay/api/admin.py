"""HTTP routes: admin."""

from __future__ import annotations

from starlette.routing import Route

__all__ = ["admin_routes"]


def admin_routes() -> list[Route]:
    return []

"""`llamay` verbs: index."""

from __future__ import annotations

from typing import Any

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    """Register this module's verbs on the `llamay` subparsers object."""

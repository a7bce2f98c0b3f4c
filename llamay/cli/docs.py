"""`llamay docs`: print the integration guide (the Markdown a server serves at /api/docs)."""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from typing import Any

__all__ = ["add_parser", "guide"]


def guide() -> str:
    """The guide shipped in the package. Read here, not through llamay.api, so printing it
    does not import the server."""
    return resources.files("llamay.web").joinpath("guide.md").read_text(encoding="utf-8")


def run_docs(_args: argparse.Namespace) -> int:
    sys.stdout.write(guide())
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "docs",
        help="print the integration guide (Markdown; a server shows it at /docs)",
        allow_abbrev=False,
        description="Print the integration guide: pointing OpenAI, Anthropic and Ollama clients at llamay.",
    )
    p.set_defaults(func=run_docs)

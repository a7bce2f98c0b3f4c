"""Pieces shared by CLI verbs: flags spelled with one or two dashes, model resolution."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..errors import LlamayError

__all__ = ["flag", "human_count", "human_bytes", "resolve_model", "fail"]


def flag(parser: argparse.ArgumentParser | Any, name: str, *short: str, **kw: Any) -> None:
    """Add a flag that accepts both `-name` and `--name` (and any extra short forms)."""
    parser.add_argument(*short, f"-{name}", f"--{name}", **kw)


def human_count(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return str(n)


def human_bytes(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def resolve_model(name: str | None) -> tuple[str, Path, str | None]:
    """A model name or .gguf path -> (name, file, sha256 if known); fetches on first use."""
    from ..store import ModelStore

    resolved = ModelStore().resolve(name)
    return resolved.name, resolved.path, resolved.sha256


def fail(exc: Exception) -> int:
    message = exc.message if isinstance(exc, LlamayError) else str(exc)
    print(f"llamay: {message}", file=sys.stderr)
    return 1

"""Pieces shared by CLI verbs: flags spelled with one or two dashes, the server address,
model resolution, error lines."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from ..errors import LlamayError

__all__ = [
    "DEFAULT_HOST",
    "flag",
    "host_flags",
    "server_url",
    "human_count",
    "human_bytes",
    "resolve_model",
    "fail",
    "pull_hint",
    "check_response",
]

DEFAULT_HOST = "localhost:11435"


def flag(parser: argparse.ArgumentParser | Any, name: str, *short: str, **kw: Any) -> None:
    """Add a flag that accepts both `-name` and `--name` (and any extra short forms)."""
    parser.add_argument(*short, f"-{name}", f"--{name}", **kw)


def host_flags(parser: argparse.ArgumentParser | Any, what: str = "the llamay server") -> None:
    """`-host` (also spelled `-url`, its older name) and `-key`, the same on every verb that
    talks to a server. The address is resolved later by `server_url`."""
    parser.add_argument(
        "-host", "--host", "-url", "--url", dest="host", default=None, metavar="HOST",
        help=f"{what}: HOST:PORT or a URL (default: $LLAMAY_HOST, else {DEFAULT_HOST})",
    )  # fmt: skip
    flag(parser, "key", default=os.environ.get("LLAMAY_API_KEY"), help="API key (default: $LLAMAY_API_KEY)")


def server_url(host: str | None) -> str:
    """The server's base URL: `host`, else $LLAMAY_HOST, else $LLAMAY_URL (the older name),
    else localhost:11435; a bare HOST:PORT gets http://."""
    host = (host or os.environ.get("LLAMAY_HOST") or os.environ.get("LLAMAY_URL") or DEFAULT_HOST).strip()
    return host.rstrip("/") if "://" in host else f"http://{host.rstrip('/')}"


def check_response(r: Any) -> Any:
    """The httpx response `r` if it succeeded; else the server's own message, raised as the
    LlamayError of its kind (as the same call made locally raises), or its status and body
    when it sent no message."""
    if r.status_code >= 400:
        from ..library.remote_wire import error_of

        r.read()
        try:
            error = r.json()["error"]
        except (ValueError, KeyError, TypeError):
            raise RuntimeError(f"the server answered {r.status_code}: {r.text[:500]}") from None
        raise error_of(error if isinstance(error, dict) else {"message": str(error)}, r.status_code, None)
    return r


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


def pull_hint(exc: Exception, name: str | None) -> Exception:
    """`exc` with the way out added when it says model `name` is missing: `llamay pull NAME`
    (not for a file path, which no pull fixes)."""
    from ..errors import ModelNotFound

    if not isinstance(exc, ModelNotFound) or not name or name.lower().endswith(".gguf"):
        return exc
    if "llamay pull" in exc.message:
        return exc
    return ModelNotFound(f"{exc.message}; to fetch it: llamay pull {name}", param=exc.param)


def fail(exc: Exception) -> int:
    message = exc.message if isinstance(exc, LlamayError) else str(exc)
    print(f"llamay: {message}", file=sys.stderr)
    return 1

"""What the Ollama routes share: Ollama's error shape, NDJSON responses, and the
runtime features they use (looked up when called, so routes light up as the runtime
grows them; a missing one is a 501 saying so)."""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ...chat.prepare import ModelRef, effective_params, loaded_alias, lookup, store_call
from ...errors import LlamayError
from ...runtime import LoadedModel
from ...store.gguf_header import HeaderCache
from ..errors import error_response
from ..http import ndjson_line
from ..http import ndjson_response as guarded_ndjson
from ..state import state_of

__all__ = [
    "NotSupported",
    "ollama_endpoint",
    "ndjson_line",
    "ndjson_response",
    "runtime_feature",
    "use_model",
    "loaded_alias",
    "store_call",
    "effective_params",
    "headers",
]

log = logging.getLogger("llamay.api.ollama")
Handler = Callable[[Request], Awaitable[Response]]


class NotSupported(LlamayError):
    """A route whose runtime or store feature this server does not have (yet)."""

    status = 501
    code = "not_implemented"
    kind = "server_error"


def ollama_endpoint(handler: Handler) -> Handler:
    """Errors in Ollama's shape: `{"error": "message"}` with the error's status."""

    @functools.wraps(handler)
    async def wrapped(request: Request) -> Response:
        try:
            return await handler(request)
        except LlamayError as exc:
            return error_response(request, exc, "ollama")

    return wrapped


def ndjson_response(lines: AsyncIterator[bytes]) -> StreamingResponse:
    """One JSON object per line, through the guarded stream every API uses: a client that
    disconnects or stops reading (http.IDLE_TIMEOUT) ends it, and the iterator's cleanup
    aborts the engine request behind it."""
    return guarded_ndjson(lines)


def runtime_feature(request: Request, owner: str, name: str) -> Any:
    """`runtime.<name>` (owner "runtime") or `runtime.store.<name>` (owner "store"), or
    NotSupported naming what is missing."""
    runtime = state_of(request).runtime
    target = runtime if owner == "runtime" else getattr(runtime, "store", None)
    found = getattr(target, name, None) if target is not None else None
    if found is None:
        what = "a model store" if target is None else f"'{owner}.{name}'"
        raise NotSupported(f"{request.url.path} is not available: this server has no {what}")
    return found


def headers(request: Request) -> HeaderCache:
    """The app's GGUF header cache."""
    return state_of(request).ollama_headers


async def use_model(request: Request, name: str, keep_alive: float | None) -> tuple[LoadedModel, int]:
    """The model `name` (see `loaded_alias`), loaded if need be, kept `keep_alive`; returns
    it and the nanoseconds spent."""
    return await lookup(state_of(request).runtime, ModelRef(name, keep_alive=keep_alive, loose_tag=True))

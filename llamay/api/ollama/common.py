"""What the Ollama routes share: Ollama's error shape, NDJSON responses, and the
runtime features they use (looked up when called, so routes light up as the runtime
grows them; a missing one is a 501 saying so)."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ...chat.defaults import effective_params, store_call
from ...errors import LlamayError, ModelNotFound
from ...runtime import LoadedModel
from ...store.gguf_header import HeaderCache
from ..errors import error_response
from ..http import ndjson_response as guarded_ndjson
from ..state import state_of
from .adapter import nanos

__all__ = [
    "NotSupported",
    "ollama_endpoint",
    "ndjson_line",
    "ndjson_response",
    "runtime_feature",
    "use_model",
    "loaded_alias",
    "store_call",
    "model_defaults",
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


def ndjson_line(obj: Any) -> bytes:
    return (json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


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
    """The model `name`, loading it if the runtime can (`runtime.use`); else one already
    loaded (`runtime.get`, keep_alive ignored). Returns it and the nanoseconds spent."""
    runtime = state_of(request).runtime
    t0 = time.perf_counter()
    use = getattr(runtime, "use", None)
    if use is not None:
        lm = await use(loaded_alias(runtime, name), keep_alive=keep_alive)
    else:
        lm = _get_loaded(runtime, name)
    return lm, nanos(time.perf_counter() - t0)


def loaded_alias(runtime: Any, name: str) -> str:
    """Ollama clients add the default tag: "x:latest" names a loaded "x" (a model served
    from a file has no tag) unless a model is loaded under the tagged name."""
    bare = name.removesuffix(":latest")
    if bare != name and hasattr(runtime, "loaded"):
        names = {m.name for m in runtime.loaded()}
        if name not in names and bare in names:
            return bare
    return name


def _get_loaded(runtime: Any, name: str) -> LoadedModel:
    try:
        found: LoadedModel = runtime.get(name)
        return found
    except ModelNotFound:
        if name.endswith(":latest"):  # Ollama clients add the default tag
            fallback: LoadedModel = runtime.get(name.removesuffix(":latest"))
            return fallback
        raise


def _defaults(runtime: Any, lm: LoadedModel) -> tuple[dict[str, Any], str | None]:
    return effective_params(runtime, lm.name, lm.info.path), store_call(runtime, "system", lm.name)


async def model_defaults(request: Request, lm: LoadedModel) -> tuple[dict[str, Any], str | None]:
    """A model's parameters (see `effective_params`) and default system prompt (set by
    `create`, else None)."""
    return await asyncio.to_thread(_defaults, state_of(request).runtime, lm)

"""Sampling defaults, the same on every route: the catalog's for a catalog model, then its
GGUF `general.sampling.*`, then the server's flags, then what `create` set for the model;
each request's own values go on top (`SamplingParams.with_defaults`)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import LlamayError
from ..store import gguf_sampling_defaults
from ..types import DEFAULTABLE

if TYPE_CHECKING:
    from ..runtime import LoadedModel

__all__ = [
    "SERVER_SAMPLING",
    "store_call",
    "server_defaults",
    "effective_params",
    "catalog_defaults",
    "model_sampling",
    "sampling_defaults",
]

# RuntimeConfig fields set by `llamay serve -temp/-top-p/-top-k/-min-p/-repeat-penalty`.
SERVER_SAMPLING = ("temperature", "top_p", "top_k", "min_p", "repeat_penalty")


def store_call(runtime: Any, method: str, *args: Any) -> Any:
    """`runtime.store.<method>(*args)`, or None when there is no such method or it fails:
    for what is nice to have (a model's parameters, its system prompt), never required."""
    fn = getattr(getattr(runtime, "store", None), method, None)
    if fn is None:
        return None
    try:
        return fn(*args)
    except (LlamayError, OSError, ValueError):
        return None


def server_defaults(runtime: Any) -> dict[str, Any]:
    """The sampling defaults given to `llamay serve` (RuntimeConfig fields that are set)."""
    config = getattr(runtime, "config", None)
    values = {k: getattr(config, k, None) for k in SERVER_SAMPLING}
    return {k: v for k, v in values.items() if v is not None}


def catalog_defaults(runtime: Any, name: str) -> dict[str, Any]:
    """The sampling defaults the store's catalog gives model `name` ({} for other models)."""
    catalog = getattr(getattr(runtime, "store", None), "catalog", None)
    entry = catalog.get(name) if catalog is not None else None
    return entry.sampling_defaults if entry is not None else {}


def effective_params(runtime: Any, name: str, path: Path | None) -> dict[str, Any]:
    """A model's parameters (Ollama option names) before a request's own: the catalog's
    for a catalog model, then the GGUF's `general.sampling.*`, then the server's flags,
    then what `create` set for `name` (the store reports the GGUF's and create's together;
    a value equal to the GGUF's counts as the GGUF's). Reads the GGUF header (cached):
    call off the event loop."""
    params = store_call(runtime, "params", name)
    if not params and path is not None:
        params = store_call(runtime, "params", str(path))
    gguf = gguf_sampling_defaults(path) if path is not None else {}
    own = {k: v for k, v in (params or {}).items() if k not in gguf or gguf[k] != v}
    return {**catalog_defaults(runtime, name), **gguf, **server_defaults(runtime), **own}


def model_sampling(runtime: Any, lm: LoadedModel) -> dict[str, Any]:
    """The sampling fields of `effective_params` for a loaded model: what a request that
    sets none gets over its API's own defaults (see SamplingParams.with_defaults)."""
    return {k: v for k, v in effective_params(runtime, lm.name, lm.info.path).items() if k in DEFAULTABLE}


async def sampling_defaults(runtime: Any, lm: LoadedModel) -> dict[str, Any]:
    """`model_sampling` off the event loop (it may read the GGUF header)."""
    return await asyncio.to_thread(model_sampling, runtime, lm)

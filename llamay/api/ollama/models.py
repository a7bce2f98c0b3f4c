"""Ollama's model routes: /api/tags, /api/ps, /api/show, /api/version, and the ones that
need the model store or a runtime that loads models (/api/copy, /api/delete, /api/pull,
/api/load, /api/reset, /api/embed): those answer 501 until the feature exists. The routes
that change the store are in `manage`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ... import __version__
from ...backend.invariance import batch_variance
from ...chat.flow import model_traits
from ...chat.reasoning import detect_reasoning
from ...embed.service import Encoder
from ...errors import InvalidRequest, LlamayError, ModelNotFound
from ...runtime import LoadedModel
from ...store.gguf_header import HeaderCache
from ..authn import principal_of
from ..embeddings import MAX_INPUTS, find_encoder, served_encoders
from ..fields import Fields
from ..http import read_json
from ..state import state_of
from . import describe
from .adapter import iso_time
from .common import (
    effective_params,
    headers,
    loaded_alias,
    ndjson_line,
    ndjson_response,
    runtime_feature,
    store_call,
    use_model,
)
from .schemas import parse_keep_alive

__all__ = ["tags", "ps", "show", "version", "load", "unload", "reset", "embed", "embeddings"]


def _loaded(runtime: Any) -> list[LoadedModel]:
    models: list[LoadedModel] = runtime.loaded() if hasattr(runtime, "loaded") else runtime.models()
    return models


def _header(cache: HeaderCache, path: Path, *, verbose: bool = False) -> tuple[dict[str, Any], int]:
    """(metadata, parameter count) of a GGUF file; empty for a file that cannot be read."""
    try:
        h = cache.get(path, verbose=verbose)
    except (OSError, ValueError):
        return {}, 0
    return h.metadata, h.n_params


def _variance(runtime: Any, cache: HeaderCache, path: Path) -> tuple[str, ...]:
    """Why a stored model's output would vary with the batch, were it loaded now."""
    config = getattr(runtime, "config", None)
    try:
        h = cache.get(path)
    except (OSError, ValueError):
        return ("an unreadable GGUF header (not checked)",)
    return batch_variance(h.metadata, h.weight_types, getattr(config, "kv_type", "f16"))


def _stored(runtime: Any) -> list[Any]:
    store = getattr(runtime, "store", None)
    return list(store.list()) if store is not None and hasattr(store, "list") else []


def _tags(runtime: Any, cache: HeaderCache, encoders: list[Encoder]) -> list[dict[str, Any]]:
    out, names = [], set()
    for m in _stored(runtime):
        meta, n = _header(cache, m.path)
        out.append(
            describe.tag_json(
                m.name, m.size, m.sha256, m.modified.timestamp(), describe.details_json(meta, n)
            )
        )
        names.add(m.name)
    for lm in _loaded(runtime):  # a model served from a file is listed too, under its own name
        if lm.name in names or f"{lm.name}:latest" in names:
            continue
        meta, n = _header(cache, lm.info.path)
        st = lm.info.path.stat()
        details = describe.details_json(meta, n or lm.info.n_params)
        out.append(describe.tag_json(lm.name, st.st_size, lm.sha256 or "", st.st_mtime, details))
        names.add(lm.name)
    for enc in encoders:  # an embedding model (-embed) or reranker served from a file
        if enc.name in names or f"{enc.name}:latest" in names:
            continue
        meta, n = _header(cache, enc.model.path)
        st = enc.model.path.stat()
        out.append(describe.tag_json(enc.name, st.st_size, "", st.st_mtime, describe.details_json(meta, n)))
    return out


async def tags(request: Request) -> Response:
    runtime, cache = state_of(request).runtime, headers(request)
    models = await asyncio.to_thread(_tags, runtime, cache, served_encoders(request))
    return JSONResponse({"models": models})


def _thinks(lm: LoadedModel) -> bool:
    return model_traits(lm).reasoning is not None


def _ps(runtime: Any, cache: HeaderCache) -> list[dict[str, Any]]:
    out, now = [], time.time()
    for lm in _loaded(runtime):
        meta, n = _header(cache, lm.info.path)
        out.append(
            describe.ps_json(
                lm.name, lm.info.size_bytes, lm.sha256 or "", describe.details_json(meta, n or lm.info.n_params),
                expires_at=getattr(lm, "expires_at", None), now=now, context_length=lm.engine.n_ctx,
                caps=describe.capabilities(meta, thinking=_thinks(lm)),
            )
        )  # fmt: skip
    return out


async def ps(request: Request) -> Response:
    models = await asyncio.to_thread(_ps, state_of(request).runtime, headers(request))
    return JSONResponse({"models": models})


def _find_loaded(runtime: Any, name: str) -> LoadedModel | None:
    for lm in _loaded(runtime):
        if name in (lm.name, f"{lm.name}:latest") or (
            name == "" and lm.name == getattr(runtime, "default_name", "")
        ):
            return lm
    return None


def _parameters(runtime: Any, name: str, path: Path) -> str:
    """Ollama's `parameters` text: the effective parameters (the catalog's, the GGUF
    defaults, then the server's sampling flags, then what `create` set; see
    common.effective_params) and `num_predict`, the server's default output budget."""
    params = effective_params(runtime, name, path)
    budget = getattr(getattr(runtime, "config", None), "max_tokens", None)
    if isinstance(budget, int):
        params.setdefault("num_predict", budget)
    return describe.parameters_text(params)


def _show(
    runtime: Any,
    cache: HeaderCache,
    name: str,
    verbose: bool,
    enc: Encoder | None = None,
    *,
    admin: bool = True,
) -> dict[str, Any]:
    """Ollama's show. The Modelfile's FROM line names the file only for an admin: a user
    learns no paths on the machine, so it names the model instead."""
    lm = _find_loaded(runtime, name)
    if lm is not None:  # what it runs with: its template as loaded
        meta, n = _header(cache, lm.info.path, verbose=verbose)
        return describe.show_json(
            path=str(lm.info.path) if admin else lm.name, meta=meta, n_params=n or lm.info.n_params,
            template="" if lm.template.fallback else lm.template.source,
            parameters=_parameters(runtime, lm.name, lm.info.path),
            caps=describe.capabilities(meta, thinking=_thinks(lm)), modified=lm.info.path.stat().st_mtime,
            variance=getattr(lm, "batch_variance", ()),
        )  # fmt: skip
    for m in _stored(runtime):
        if name in (m.name, m.name.removesuffix(":latest")):
            meta, n = _header(cache, m.path, verbose=verbose)
            template = store_call(runtime, "template", m.name) or str(
                meta.get("tokenizer.chat_template") or ""
            )
            thinks = detect_reasoning(template, lambda _: None) is not None
            return describe.show_json(
                path=str(m.path) if admin else m.name, meta=meta, n_params=n, template=template, parameters=_parameters(runtime, m.name, m.path),
                caps=describe.capabilities(meta, thinking=thinks), modified=m.modified.timestamp(),
                variance=_variance(runtime, cache, m.path),
            )  # fmt: skip
    if enc is not None:  # an encoder served from a file: no template, it only embeds or ranks
        meta, n = _header(cache, enc.model.path, verbose=verbose)
        return describe.show_json(
            path=str(enc.model.path) if admin else name, meta=meta, n_params=n, template="", parameters="",
            caps=describe.capabilities(meta, thinking=False), modified=enc.model.path.stat().st_mtime,
        )  # fmt: skip
    raise ModelNotFound(f"model '{name}' not found", param="model")


async def show(request: Request) -> Response:
    f = Fields(await read_json(request))
    name = f.text("model") or f.text("name") or ""
    verbose = bool(f.flag("verbose", False))
    runtime, cache, enc = state_of(request).runtime, headers(request), find_encoder(request, name)
    admin = principal_of(request).admin
    body = await asyncio.to_thread(_show, runtime, cache, name, verbose, enc, admin=admin)
    return JSONResponse(body)


async def version(request: Request) -> Response:
    return JSONResponse({"version": describe.OLLAMA_VERSION, "llamay": __version__})


async def load(request: Request) -> Response:
    """llamay's own: load a model (Ollama's empty-prompt load, with a body of its own).

    With `stream` (the default, as on /api/pull) the answer is NDJSON: `{"status":
    "loading", "completed", "total"}` (bytes of weights read) while it loads, then the final
    object with `status` "success" (or "already_loaded"), `context_length` and
    `load_duration`; a load that fails after it started is `{"status": "error", "error",
    "code"}`. A load that fails at once (no such model, no room, no right) is an HTTP error,
    as is every failure with `"stream": false`, which answers with the final object alone."""
    f = Fields(await read_json(request))
    keep_alive = parse_keep_alive(f.raw("keep_alive"))
    name = f.text("model") or ""
    runtime = state_of(request).runtime
    was_loaded = _find_loaded(runtime, name) is not None
    if not f.flag("stream", True) or not hasattr(runtime, "load_progress"):
        lm, load_ns = await use_model(request, name, keep_alive)
        return JSONResponse(_loaded_json(lm, load_ns, was_loaded))
    task = asyncio.ensure_future(use_model(request, name, keep_alive))
    # Until the load has read something, a failure is still an HTTP error.
    while not task.done() and runtime.load_progress(loaded_alias(runtime, name)) is None:
        await asyncio.wait({task}, timeout=0.05)
    if task.done():
        lm, load_ns = task.result()  # raises the load's error
        return ndjson_response(_one(_loaded_json(lm, load_ns, was_loaded)))
    return ndjson_response(_load_lines(runtime, name, task))


def _loaded_json(lm: LoadedModel, load_ns: int, was_loaded: bool) -> dict[str, Any]:
    return {
        "status": "already_loaded" if was_loaded else "success",
        "model": lm.name, "created_at": iso_time(time.time()), "done": True, "done_reason": "load",
        "load_duration": load_ns, "context_length": lm.engine.n_ctx,
    }  # fmt: skip


async def _one(obj: dict[str, Any]) -> AsyncIterator[bytes]:
    yield ndjson_line(obj)


async def _load_lines(runtime: Any, name: str, task: asyncio.Future[Any]) -> AsyncIterator[bytes]:
    """Progress lines every 0.2 s while `task` loads `name`, then its outcome. A reader that
    leaves does not stop the load (others may wait for the same model)."""
    key = loaded_alias(runtime, name)
    while not task.done():
        got = runtime.load_progress(key)
        if got is not None:
            yield ndjson_line({"status": "loading", "completed": got[0], "total": got[1]})
        await asyncio.wait({task}, timeout=0.2)
    error = task.exception()
    if error is None:
        lm, load_ns = task.result()
        yield ndjson_line(_loaded_json(lm, load_ns, False))
        return
    message = error.message if isinstance(error, LlamayError) else str(error)
    code = getattr(error, "code", None) or "load_failed"
    yield ndjson_line({"status": "error", "error": message, "code": code})


async def unload(request: Request) -> Response:
    """llamay's own: unload one model now (Ollama's way: an empty generate, keep_alive 0)."""
    name = Fields(await read_json(request)).text("model", required=True)
    done = await runtime_feature(request, "runtime", "unload")(loaded_alias(state_of(request).runtime, name))
    return JSONResponse({"status": "success", "unloaded": bool(done)})


async def reset(request: Request) -> Response:
    """llamay's own: unload every model now."""
    names = await runtime_feature(request, "runtime", "reset")()
    return JSONResponse({"status": "success", "unloaded": list(names or [])})


async def embed(request: Request) -> Response:
    """POST /api/embed: `input` a string or strings; vectors L2-normalised, cut to
    `dimensions` if given. Needs `runtime.embed(name, texts, truncate=, keep_alive=)`
    returning (vectors, prompt token count)."""
    t0 = time.perf_counter()
    f = Fields(await read_json(request))
    raw = f.raw("input")
    texts = [raw] if isinstance(raw, str) else raw
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise InvalidRequest("'input' must be a string or a non-empty array of strings", param="input")
    if len(texts) > MAX_INPUTS:
        raise InvalidRequest(f"'input' has {len(texts)} items; at most {MAX_INPUTS} are taken", param="input")
    dimensions = f.integer("dimensions", None, lo=1)
    keep_alive = parse_keep_alive(f.raw("keep_alive"))
    name = f.text("model") or ""
    fn = runtime_feature(request, "runtime", "embed")
    vectors, n_tokens = await fn(name, texts, truncate=bool(f.flag("truncate", True)), keep_alive=keep_alive)
    return JSONResponse(
        {"model": name, "embeddings": describe.embed_vectors(vectors, dimensions),
         "total_duration": int((time.perf_counter() - t0) * 1e9), "load_duration": 0, "prompt_eval_count": n_tokens}
    )  # fmt: skip


async def embeddings(request: Request) -> Response:
    """The older POST /api/embeddings: one `prompt`, one vector as the model gives it."""
    f = Fields(await read_json(request))
    prompt = f.text("prompt", "") or ""
    fn = runtime_feature(request, "runtime", "embed")
    vectors, _ = await fn(
        f.text("model") or "", [prompt], truncate=True, keep_alive=parse_keep_alive(f.raw("keep_alive"))
    )
    return JSONResponse({"embedding": list(vectors[0])})

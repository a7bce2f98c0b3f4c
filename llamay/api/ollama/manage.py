"""Ollama's routes that change the model store: /api/pull and /api/create (progress as
NDJSON), /api/copy, /api/delete. Each uses `runtime.store` and answers 501 while the
store lacks the method."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...errors import InvalidRequest
from ..fields import Fields
from ..http import read_json
from ..state import state_of
from . import describe
from .common import NotSupported, ndjson_line, ndjson_response, runtime_feature

__all__ = ["copy", "delete", "pull", "push", "create"]

Progress = Callable[[dict[str, Any]], None]
# Go template actions ({{ .Prompt }}, {{ if .System }}, {{ range .Messages }}): not Jinja.
_GO_TEMPLATE = re.compile(r"\{\{-?\s*(?:\.|(?:if|range|with)\s+\.)")
_UNSUPPORTED_CREATE = ("files", "adapters", "quantize", "messages")


def _changing(request: Request, name: str) -> Callable[..., Any]:
    """The store's method `name`, made to have every loaded model read its parameters again
    once it has run (`create` may have given a loaded name new ones)."""
    change = runtime_feature(request, "store", name)
    forget = getattr(state_of(request).runtime, "forget_params", None)

    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return change(*args, **kwargs)
        finally:
            if forget is not None:
                forget()

    return run


async def copy(request: Request) -> Response:
    f = Fields(await read_json(request))
    source, destination = f.text("source", required=True), f.text("destination", required=True)
    await asyncio.to_thread(_changing(request, "copy"), source, destination)
    return Response(status_code=200)


async def delete(request: Request) -> Response:
    f = Fields(await read_json(request))
    name = f.text("model") or f.text("name", required=True)
    await asyncio.to_thread(_changing(request, "remove"), name)
    return Response(status_code=200)


async def pull(request: Request) -> Response:
    """`model` is any source the store pulls from (a catalog name, hf:..., a URL); `name`
    (not Ollama's) stores it under another name. Progress: `status`, with `digest`,
    `total` and `completed` (bytes) while bytes move, ending with {"status": "success"}."""
    f = Fields(await read_json(request))
    source = f.text("model") or f.text("name", required=True)
    local = f.text("name") if f.text("model") else None
    fetch = _changing(request, "pull")
    fresh = {"fresh": True} if f.flag("fresh", False) else {}  # llamay's: drop partial downloads
    return await _respond(f, lambda progress: fetch(source, local, progress=progress, **fresh))


async def push(request: Request) -> Response:
    raise NotSupported("/api/push: this server does not publish models to a registry")


async def create(request: Request) -> Response:
    """`model` made `from` a stored, catalog or pullable model, with `parameters` (Ollama
    option names), `template` (a Jinja chat template) and `system` overlaid."""
    f = Fields(await read_json(request))
    name = f.text("model") or f.text("name", required=True)
    source = f.text("from")
    for key in _UNSUPPORTED_CREATE:
        if f.raw(key):
            raise InvalidRequest(f"'{key}' is not supported here: create from a model with 'from'", param=key)
    if source is None:
        raise InvalidRequest("'from' is required: the model to create this one from", param="from")
    template = f.text("template")
    if template is not None and _GO_TEMPLATE.search(template):
        raise InvalidRequest(
            "'template' is a Go template; models here use Jinja chat templates (as in tokenizer.chat_template)",
            param="template",
        )
    params = dict(f.obj("parameters") or {})
    system = f.text("system")
    make = _changing(request, "create")

    def run(progress: Progress) -> Any:
        return make(name, source, params=params, template=template, system=system, progress=progress)

    return await _respond(f, run)


async def _respond(f: Fields, run: Callable[[Progress], Any]) -> Response:
    if not f.flag("stream", True):
        await asyncio.to_thread(run, lambda _: None)
        return JSONResponse({"status": "success"})
    return ndjson_response(_progress_lines(run))


async def _progress_lines(run: Callable[[Progress], Any]) -> AsyncIterator[bytes]:
    """Runs `run` in a thread, passing its progress events on as lines; an error after the
    stream started is an {"error": ...} line (Ollama clients raise it)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    def progress(event: dict[str, Any]) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, dict(event))

    task = asyncio.ensure_future(asyncio.to_thread(run, progress))
    last = ""
    while not (task.done() and queue.empty()):
        if queue.empty():
            getter = asyncio.ensure_future(queue.get())
            await asyncio.wait({task, getter}, return_when=asyncio.FIRST_COMPLETED)
            if not getter.done():  # the run ended: what it sent is queued already
                getter.cancel()
                continue
            event = getter.result()
        else:
            event = queue.get_nowait()
        line = describe.progress_json(event)
        last = line["status"]
        yield ndjson_line(line)
    error = task.exception()
    if error is not None:
        yield ndjson_line({"error": getattr(error, "message", str(error))})
    elif last != "success":
        yield ndjson_line({"status": "success"})

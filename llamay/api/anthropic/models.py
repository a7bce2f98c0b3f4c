"""GET /v1/models in Anthropic's shape, for requests that carry `anthropic-version` (the
official client always does; OpenAI clients never do). The path is shared with OpenAI's
model list, so the OpenAI routes hand such requests here."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ...errors import InvalidRequest, LlamayError
from ...runtime import LoadedModel, Runtime
from ..errors import error_response
from ..http import json_response
from ..state import state_of

__all__ = ["speaks_anthropic", "model_json", "models_page", "list_models", "get_model"]


def speaks_anthropic(request: Request) -> bool:
    return "anthropic-version" in request.headers


def model_json(m: LoadedModel) -> dict[str, Any]:
    """A ModelInfo; `created_at` is when this server loaded it (RFC 3339, UTC), and a
    prompt may take the whole context (`max_input_tokens`)."""
    created = datetime.fromtimestamp(m.loaded_at, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    return {
        "type": "model",
        "id": m.name,
        "display_name": m.name,
        "created_at": created,
        "lifecycle": "active",
        "max_input_tokens": m.engine.n_ctx,
    }


def models_page(
    models: list[dict[str, Any]], limit: int = 20, after_id: str | None = None, before_id: str | None = None
) -> dict[str, Any]:
    """One page of `models` (newest first, as Anthropic lists them): `after_id` pages
    forward from that id, `before_id` back; `has_more` says whether more lie that way."""
    models = sorted(models, key=lambda m: m["created_at"], reverse=True)
    ids = [m["id"] for m in models]
    for key, value in (("after_id", after_id), ("before_id", before_id)):
        if value is not None and value not in ids:
            raise InvalidRequest(f"'{key}' names '{value}', which is not a listed model", param=key)
    if before_id is not None:
        end = ids.index(before_id)
        start = max(0, end - limit)
        data, more = models[start:end], start > 0
    else:
        start = ids.index(after_id) + 1 if after_id is not None else 0
        data, more = models[start : start + limit], start + limit < len(models)
    return {
        "data": data,
        "has_more": more,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
    }


def _limit(request: Request) -> int:
    raw = request.query_params.get("limit", "20")
    if not raw.isdigit() or not 1 <= int(raw) <= 1000:
        raise InvalidRequest(f"'limit' must be an integer from 1 to 1000, not {raw!r}", param="limit")
    return int(raw)


async def list_models(request: Request) -> Response:
    runtime: Runtime = state_of(request).runtime
    try:
        q = request.query_params
        page = models_page(
            [model_json(m) for m in runtime.models()], _limit(request), q.get("after_id"), q.get("before_id")
        )
    except LlamayError as exc:
        return error_response(request, exc, "anthropic")
    return json_response(page)


async def get_model(request: Request) -> Response:
    runtime: Runtime = state_of(request).runtime
    try:
        m = runtime.get(request.path_params["model"])
    except LlamayError as exc:
        return error_response(request, exc, "anthropic")
    return json_response(model_json(m))

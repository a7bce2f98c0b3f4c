"""Errors in each API's own shape, from one place: `error_status`, `error_body` and
`error_headers` map a LlamayError for "openai", "anthropic" or "ollama" (so each official
client reports it properly); `api_of` tells which API a request belongs to. The app's
handlers answer every status this way, a LlamayError, a route or method that does not
exist (404, 405) and an unexpected failure (500) alike; a stream that fails after it began
reports the same body through its API's renderer."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping
from typing import Any, Literal

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..errors import InternalError, LlamayError, Overloaded
from .http import ClientGone

__all__ = [
    "Api",
    "api_of",
    "request_api",
    "error_status",
    "error_body",
    "error_headers",
    "error_response",
    "exception_handlers",
    "HttpError",
]

log = logging.getLogger("llamay.api")
Api = Literal["openai", "anthropic", "ollama"]
# Anthropic's error types by status; a 5xx not listed is "api_error".
_ANTHROPIC_KINDS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


class HttpError(LlamayError):
    """A status the router answers itself (no such route: 404; a method the route does
    not take: 405), as an error every API can render. `code` is the status as text."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = str(status)
        self.kind = "not_found_error" if status == 404 else "invalid_request_error"


def api_of(path: str, headers: Mapping[str, str] | None = None) -> Api:
    """Which API's error shape a request answers in: the path's, and for the model list
    (a path both share) the client's, told by `anthropic-version` among `headers`.
    Everything else speaks OpenAI's."""
    if path.startswith("/v1/messages"):
        return "anthropic"
    if path.startswith("/api/"):
        return "ollama"
    if headers is not None and path.startswith("/v1/models") and "anthropic-version" in headers:
        return "anthropic"
    return "openai"


def request_api(request: Request) -> Api:
    return api_of(request.url.path, request.headers)


def error_status(exc: LlamayError, api: Api = "openai") -> int:
    """The HTTP status: the error's own, except Anthropic's 529 for overloaded."""
    return 529 if api == "anthropic" and isinstance(exc, Overloaded) else exc.status


def error_body(exc: LlamayError, api: Api = "openai") -> dict[str, Any]:
    if api == "anthropic":
        status = error_status(exc, api)
        kind = _ANTHROPIC_KINDS.get(status) or ("api_error" if status >= 500 else "invalid_request_error")
        return {"type": "error", "error": {"type": kind, "message": exc.message}}
    if api == "ollama":
        return {"error": exc.message}
    return {"error": {"message": exc.message, "type": exc.kind, "param": exc.param, "code": exc.code}}


def error_headers(exc: LlamayError, api: Api = "openai") -> dict[str, str] | None:
    if isinstance(exc, Overloaded):
        return {"retry-after": str(exc.retry_after)}
    return None


def error_response(
    request: Request,
    exc: LlamayError,
    api: Api | None = None,
    extra: dict[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """`exc` answered in the shape of `api` (by default, the API the request belongs to),
    with `extra` fields merged into the body and `headers` added; an Anthropic error
    carries a request id (body and header). Server-side failures are logged."""
    api = api or request_api(request)
    if exc.status >= 500:
        log.error("%s %s failed: %s", request.method, request.url.path, exc.message)
    body = {**error_body(exc, api), **(extra or {})}
    out = {**(error_headers(exc, api) or {}), **(headers or {})}
    if api == "anthropic":
        body.setdefault("request_id", "req_" + secrets.token_hex(12))
        out.setdefault("request-id", body["request_id"])
    return JSONResponse(body, error_status(exc, api), out or None)


async def on_llamay_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, LlamayError)
    return error_response(request, exc)


async def on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = {
        404: f"no route for {request.method} {request.url.path}",
        405: f"method {request.method} is not allowed on {request.url.path}",
    }.get(exc.status_code, str(exc.detail))
    return error_response(request, HttpError(exc.status_code, message), headers=exc.headers)


async def on_client_gone(request: Request, exc: Exception) -> Response:
    # Nobody reads this; the status only shows in the access log.
    return Response(status_code=499)


async def on_unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unexpected error on %s %s", request.method, request.url.path)
    return error_response(request, InternalError.of(exc))


def exception_handlers() -> dict[Any, Any]:
    return {
        LlamayError: on_llamay_error,
        HTTPException: on_http_error,
        ClientGone: on_client_gone,
        Exception: on_unexpected,
    }

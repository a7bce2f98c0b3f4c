"""Error bodies: each API maps a LlamayError to its own shape in one place."""

from __future__ import annotations

import logging
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..errors import LlamayError, Overloaded
from .http import ClientGone

__all__ = ["exception_handlers", "openai_error_body"]

log = logging.getLogger("llamay.api")


def openai_error_body(exc: LlamayError) -> dict[str, Any]:
    return {"error": {"message": exc.message, "type": exc.kind, "param": exc.param, "code": exc.code}}


def _headers(exc: LlamayError) -> dict[str, str] | None:
    if isinstance(exc, Overloaded):
        return {"Retry-After": str(exc.retry_after)}
    return None


async def on_llamay_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, LlamayError)
    if exc.status >= 500:
        log.error("%s %s failed: %s", request.method, request.url.path, exc.message)
    return JSONResponse(openai_error_body(exc), status_code=exc.status, headers=_headers(exc))


async def on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
    message = {
        404: f"no route for {request.method} {request.url.path}",
        405: (f"method {request.method} is not allowed on {request.url.path}"),
    }.get(exc.status_code, str(exc.detail))
    body = {"error": {"message": message, "type": kind, "param": None, "code": str(exc.status_code)}}
    return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)


async def on_client_gone(request: Request, exc: Exception) -> Response:
    # Nobody reads this; the status only shows in the access log.
    return Response(status_code=499)


async def on_unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unexpected error on %s %s", request.method, request.url.path)
    body = {
        "error": {
            "message": f"internal error: {type(exc).__name__}",
            "type": "server_error",
            "param": None,
            "code": "internal_error",
        }
    }
    return JSONResponse(body, status_code=500)


def exception_handlers() -> dict[Any, Any]:
    return {
        LlamayError: on_llamay_error,
        HTTPException: on_http_error,
        ClientGone: on_client_gone,
        Exception: on_unexpected,
    }

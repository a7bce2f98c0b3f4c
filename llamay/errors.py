"""One error hierarchy for the whole project.

Every error a caller can cause carries its HTTP status and a stable code; each API
maps it to its own error body in one place. Nothing matches on message text.
"""

from __future__ import annotations

__all__ = [
    "LlamayError",
    "InvalidRequest",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "ModelNotFound",
    "Conflict",
    "RequestTimeout",
    "PayloadTooLarge",
    "ContextOverflow",
    "Overloaded",
    "TooManyRequests",
    "QueueLimit",
    "GrammarError",
    "EngineError",
    "StoreError",
    "InternalError",
]


class LlamayError(Exception):
    """Base class. `status` is the HTTP status, `code` a stable machine-readable code,
    `param` the request field at fault (if any)."""

    status: int = 500
    code: str = "internal_error"
    kind: str = "server_error"

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class InvalidRequest(LlamayError):
    status = 400
    code = "invalid_request"
    kind = "invalid_request_error"


class Unauthorized(LlamayError):
    status = 401
    code = "invalid_api_key"
    kind = "authentication_error"


class Forbidden(LlamayError):
    status = 403
    code = "forbidden"
    kind = "permission_error"


class NotFound(LlamayError):
    status = 404
    code = "not_found"
    kind = "not_found_error"


class ModelNotFound(NotFound):
    code = "model_not_found"


class RequestTimeout(LlamayError):
    status = 408
    code = "request_timeout"
    kind = "invalid_request_error"


class Conflict(LlamayError):
    status = 409
    code = "conflict"
    kind = "invalid_request_error"


class PayloadTooLarge(LlamayError):
    status = 413
    code = "payload_too_large"
    kind = "invalid_request_error"


class ContextOverflow(InvalidRequest):
    """The prompt (plus what must be generated) does not fit the model's context."""

    code = "context_length_exceeded"


class Overloaded(LlamayError):
    """The request queue is full; the caller should retry after `retry_after` seconds."""

    status = 503
    code = "overloaded"
    kind = "overloaded_error"

    def __init__(self, message: str, *, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class TooManyRequests(Overloaded):
    """The caller is past one of its quotas (contexts, their bytes, requests in flight);
    retry after `retry_after` seconds, or free something first."""

    status = 429
    code = "rate_limited"
    kind = "rate_limit_error"


class QueueLimit(TooManyRequests):
    """The caller already has as many sequences waiting for a model as one principal may
    (every prompt and every choice is one); retry once some of them have started. Other
    principals' traffic never causes it."""

    code = "queue_limit_exceeded"


class GrammarError(InvalidRequest):
    """A schema, grammar or regex that cannot be compiled or enforced."""

    code = "invalid_grammar"


class EngineError(LlamayError):
    """The engine failed on a request (never the caller's fault)."""

    status = 500
    code = "engine_error"


class StoreError(LlamayError):
    """A model could not be fetched, verified or stored."""

    status = 502
    code = "store_error"


class InternalError(LlamayError):
    """An unexpected failure (a bug, not the caller's doing), reported as a 500 that names
    only the exception's type: its text may hold anything."""

    @classmethod
    def of(cls, exc: BaseException) -> InternalError:
        return cls(f"internal error: {type(exc).__name__}")

"""Errors only the library raises. Every error a user sees is a `llamay.LlamayError`, in
process and remote alike; these two cover what neither the engine nor a server reports."""

from __future__ import annotations

from typing import Any

from ..errors import LlamayError

__all__ = ["OutputError", "ServerUnreachable"]


class OutputError(LlamayError):
    """The answer does not parse into the requested output type. It happens when
    generation stopped before the value was complete (`max_tokens`, the context), or
    when the type checks more than a schema can say (a validator). `result` is the
    whole ChatResult, `text` the raw answer."""

    status = 422
    code = "invalid_output"
    kind = "invalid_output_error"

    def __init__(self, message: str, *, text: str = "", result: Any = None) -> None:
        super().__init__(message)
        self.text = text
        self.result = result


class ServerUnreachable(LlamayError):
    """A remote `LLM(url=...)` could not reach its server (refused, timed out, dropped)."""

    status = 503
    code = "server_unreachable"
    kind = "server_error"

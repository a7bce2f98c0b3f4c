"""The `X-Llamay-Batch-Invariant` response header: whether the model a request used is inside
llamay's batch-invariance promise (`yes`: its output does not depend on what else the server
runs), or why it may not be (`no; Q3_K weights (not checked)`; see backend.invariance). A pure
ASGI middleware: it gives each request an empty list that the runtime fills with the models the
request uses (`runtime.MODELS_USED`), and adds the header as the response starts, when the
request used a model. Nothing else about a response changes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..runtime import MODELS_USED

__all__ = ["HEADER", "BatchInvariantHeader", "header_value"]

HEADER = b"x-llamay-batch-invariant"


def header_value(used: Sequence[Any]) -> bytes | None:
    """The header for a request that used the models `used` (None when it used none)."""
    if not used:
        return None
    reasons = list(dict.fromkeys(r for lm in used for r in getattr(lm, "batch_variance", ())))
    if not reasons:
        return b"yes"
    return ("no; " + "; ".join(reasons)).encode("ascii", errors="replace")


class BatchInvariantHeader:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        used: list[Any] = []
        token = MODELS_USED.set(used)

        async def send_with_header(message: Message) -> None:
            if message["type"] == "http.response.start":
                value = header_value(used)
                if value is not None:
                    message = {**message, "headers": [*message.get("headers", []), (HEADER, value)]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_header)
        finally:
            MODELS_USED.reset(token)

"""Pure translation between the library's requests and a llamay server's OpenAI-shaped
JSON: request bodies, SSE lines, error bodies, scored echoes. No I/O here."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

from ..errors import (
    Conflict,
    ContextOverflow,
    EngineError,
    Forbidden,
    GrammarError,
    InvalidRequest,
    LlamayError,
    ModelNotFound,
    NotFound,
    Overloaded,
    PayloadTooLarge,
    RequestTimeout,
    Unauthorized,
)
from .errors import ServerUnreachable
from .options import Ask, Options
from .results import ScoreResult

__all__ = ["chat_body", "completion_body", "error_from", "score_results", "sse_events"]

_BY_CODE: dict[str, type[LlamayError]] = {
    "context_length_exceeded": ContextOverflow,
    "invalid_grammar": GrammarError,
    "model_not_found": ModelNotFound,
}
_BY_STATUS: dict[int, type[LlamayError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    408: RequestTimeout,
    409: Conflict,
    413: PayloadTooLarge,
    422: InvalidRequest,
}
# The server's default for constrained output without max_tokens (RuntimeConfig.max_tokens).
SERVER_MAX_TOKENS = 2048
UNLIMITED = 1 << 30  # the server clamps it to the room left in the context


def _sampling(opts: Options) -> dict[str, Any]:
    body: dict[str, Any] = dict(opts.sampling_given())
    if opts.stop:
        body["stop"] = list(opts.stop)
    return body


def _response_format(ask_output: Any) -> dict[str, Any]:
    # Strict when every keyword can be enforced (checked by compiling here, with no
    # model); otherwise the server enforces what it can and the type validates the rest.
    strict = not ask_output.grammar.unenforced
    name = "".join(ch if ch.isalnum() or ch in "_-" else "_" for ch in ask_output.name)[:64] or "output"
    return {
        "type": "json_schema",
        "json_schema": {"name": name, "schema": ask_output.schema, "strict": strict},
    }


def chat_body(model: str, ask: Ask) -> dict[str, Any]:
    """A streamed /v1/chat/completions body for one round."""
    opts = ask.opts
    body: dict[str, Any] = {
        "model": model,
        "messages": ask.messages,
        "stream": True,
        "stream_options": {"include_usage": True},
        **_sampling(opts),
    }
    if opts.max_tokens is not None:
        body["max_tokens"] = opts.max_tokens
    if ask.tools and ask.tool_choice != "none":
        body["tools"] = [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
            }
            for t in ask.tools
        ]
        choice = ask.tool_choice
        body["tool_choice"] = (
            choice if choice in ("auto", "required") else {"type": "function", "function": {"name": choice}}
        )
    if ask.output is not None:
        body["response_format"] = _response_format(ask.output)
    if opts.thinking is False:
        body["reasoning_effort"] = "none"
    elif isinstance(opts.thinking, int) and not isinstance(opts.thinking, bool):
        body["reasoning_budget_tokens"] = opts.thinking
    session = ask.session
    if session is not None and session.id is not None and not session.stale:
        body["llamay_session"] = session.id
    return body


def completion_body(model: str, prompt: str, opts: Options) -> dict[str, Any]:
    """A /v1/completions body. Without max_tokens the library means "until the model
    stops" (the route's own default is 16): constrained output gets the schema's bound,
    as in process, else the server's limit."""
    body: dict[str, Any] = {"model": model, "prompt": prompt, **_sampling(opts)}
    limit = opts.max_tokens
    if limit is None:
        if opts.output is None:
            limit = UNLIMITED
        else:
            bound = getattr(opts.output.grammar, "max_bytes", None)
            limit = SERVER_MAX_TOKENS if bound is None else bound + 1
    body["max_tokens"] = limit
    if opts.output is not None:
        body["response_format"] = _response_format(opts.output)
    return body


def error_from(source: httpx.Response | httpx.HTTPError) -> LlamayError:
    """The LlamayError for an error response (by its code, else its status) or for a
    transport failure (ServerUnreachable)."""
    if isinstance(source, httpx.HTTPError):
        return ServerUnreachable(f"the llamay server could not be reached: {type(source).__name__}: {source}")
    try:
        err = source.json().get("error") or {}
    except (ValueError, AttributeError):
        err = {}
    if not isinstance(err, dict):
        err = {"message": str(err)}
    return error_of(err, source.status_code, source.headers.get("retry-after"))


def error_of(err: dict[str, Any], status: int, retry_after: str | None = None) -> LlamayError:
    """An OpenAI-shaped error object as the LlamayError subclass it stands for."""
    message = str(err.get("message") or f"the server answered {status}")
    code = str(err.get("code") or "")
    param = err.get("param")
    exc: LlamayError
    if status == 503 or code == "overloaded":
        wait = int(retry_after) if retry_after is not None and retry_after.isdigit() else 1
        exc = Overloaded(message, retry_after=wait)
    else:
        cls = _BY_CODE.get(code) or _BY_STATUS.get(status) or (EngineError if status >= 500 else LlamayError)
        exc = cls(message, param=param if isinstance(param, str) else None)
    if code:
        exc.code = code
    return exc


async def sse_events(lines: AsyncIterator[str]) -> AsyncIterator[dict[str, Any]]:
    """The JSON events of an SSE stream, up to `[DONE]`; an error event raises."""
    async for line in lines:
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        event = json.loads(data)
        if isinstance(event, dict) and "error" in event and not event.get("choices"):
            err = event["error"] if isinstance(event["error"], dict) else {"message": str(event["error"])}
            raise error_of(err, 500)
        yield event


def score_results(body: dict[str, Any], continuations: list[str]) -> list[ScoreResult]:
    """ScoreResults from an echo + logprobs completion of prompt + each continuation. A
    continuation's tokens are those reaching past where it starts in the echoed text (a
    token that straddles the seam counts: its log-probability covers continuation text)."""
    out = []
    for choice, cont in zip(body.get("choices", []), continuations, strict=True):
        lp = choice.get("logprobs") or {}
        text = choice.get("text", "")
        seam = len(text) - len(cont)
        tokens: list[str] = []
        logprobs: list[float] = []
        greedy = True
        for tok, value, top, offset in zip(
            lp.get("tokens", []), lp.get("token_logprobs", []), lp.get("top_logprobs", []), lp.get("text_offset", []),
            strict=True,
        ):  # fmt: skip
            if offset + len(tok) <= seam or value is None:
                continue
            tokens.append(tok)
            logprobs.append(float(value))
            best = max((v for v in (top or {}).values() if v is not None), default=value)
            greedy = greedy and value >= best
        if not tokens:
            raise EngineError(f"the server returned no scores for continuation {cont!r}")
        out.append(ScoreResult(cont, tokens, logprobs, sum(logprobs), greedy))
    return out

"""Pure functions between OpenAI shapes and engine records: prompts in, JSON out; and the
renderer that turns the chat pipeline's steps into chat completions (text completions:
completions_render.py), streamed (SSE chunks, the usage chunk if asked, [DONE]) or whole (one JSON body). No I/O
here, so everything is tested with golden JSON."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...errors import LlamayError
from ...types import FinishEvent, TokenEvent, Usage
from ..errors import error_body
from ..http import SSE

if TYPE_CHECKING:
    from ...chat.flow import Piece
    from ...chat.pipeline import Choice, Delta, Done, Generation

__all__ = [
    "new_id",
    "usage_json",
    "chat_logprob_json",
    "chat_logprobs_json",
    "chat_response",
    "chat_chunk",
    "finish_reason",
    "finish_extra",
    "chat_message",
    "finish_chunk",
    "usage_chunk",
    "sse_frame",
    "token_text",
    "json_logprob",
    "NOTHING",
    "Base",
    "message_json",
    "ChatRenderer",
]


def new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(12)}"


def finish_reason(event: FinishEvent) -> str:
    """OpenAI's reasons, plus "error" when the engine had to end a choice it could not
    complete (the message says why)."""
    return {"stop": "stop", "length": "length", "tool_calls": "tool_calls"}.get(event.reason, "error")


def finish_extra(event: FinishEvent) -> dict[str, Any]:
    """Why a choice ended early, when there is more to say than the reason; `closed_early`
    when a constrained answer was finished with its shortest valid ending because
    max_tokens ran low (the reason stays "stop": the answer is complete and valid)."""
    out: dict[str, Any] = {"finish_message": event.message} if event.message else {}
    if event.extra.get("closed_early"):
        out["closed_early"] = True
    return out


def usage_json(usages: list[Usage]) -> dict[str, Any]:
    """Prompt tokens count once (all choices share the prompt); completions add up."""
    prompt = usages[0].prompt_tokens if usages else 0
    completion = sum(u.completion_tokens for u in usages)
    cached = usages[0].cached_tokens if usages else 0
    out: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }
    reasoning = sum(u.reasoning_tokens for u in usages)
    if reasoning:  # of completion_tokens, those spent thinking
        out["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return out


def token_text(token_bytes: bytes) -> str:
    return token_bytes.decode("utf-8", errors="replace")


def json_logprob(value: float | None) -> float | None:
    """JSON has no -inf: a token the constraint forbade reports OpenAI's floor instead."""
    if value is None:
        return None
    return max(value, -9999.0)


def chat_logprob_json(event: TokenEvent) -> dict[str, Any]:
    return {
        "token": token_text(event.token_bytes),
        "logprob": json_logprob(event.logprob),
        "bytes": list(event.token_bytes),
        "top_logprobs": [
            {"token": token_text(t.text), "logprob": json_logprob(t.logprob), "bytes": list(t.text)}
            for t in event.top
        ],
    }


def chat_logprobs_json(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """A chat choice's logprobs object: `refusal` is required by OpenAI's schema, and null
    here because a local model has no refusal channel."""
    return {"content": entries, "refusal": None}


def chat_message(content: str | None) -> dict[str, Any]:
    """An assistant message as OpenAI's schema requires it (`refusal` included)."""
    return {"role": "assistant", "content": content, "refusal": None}


def chat_response(
    rid: str, model: str, choices: list[tuple[str, FinishEvent, list[TokenEvent] | None]]
) -> dict[str, Any]:
    """A whole chat.completion. Each choice: (text, finish event, token events if logprobs)."""
    return {
        "id": rid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": i,
                "message": chat_message(text),
                "logprobs": chat_logprobs_json([chat_logprob_json(e) for e in events])
                if events is not None
                else None,
                "finish_reason": finish_reason(fin),
                **finish_extra(fin),
            }
            for i, (text, fin, events) in enumerate(choices)
        ],
        "usage": usage_json([fin.usage for _, fin, _ in choices]),
    }


def chat_chunk(
    rid: str,
    model: str,
    created: int,
    index: int,
    delta: dict[str, Any],
    *,
    finish: str | None = None,
    logprobs: list[dict[str, Any]] | None = None,
    with_usage_field: bool = False,
) -> dict[str, Any]:
    chunk: dict[str, Any] = {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": index,
                "delta": delta,
                "logprobs": chat_logprobs_json(logprobs) if logprobs is not None else None,
                "finish_reason": finish,
            }
        ],
    }
    if with_usage_field:
        chunk["usage"] = None
    return chunk


def finish_chunk(chunk: dict[str, Any], event: FinishEvent, check: dict[str, Any] | None) -> dict[str, Any]:
    """`chunk`, the last of one choice's stream, completed with what the whole response says
    of that choice: why it ended early, its schema check, and its own counts as the choice's
    `llamay_usage` (always, so a client that did not ask for the usage chunk still learns
    them). The chunk's `usage` stays as OpenAI specifies it: null (with `include_usage`) or
    absent, since clients add up every `usage` a stream carries and the trailing usage chunk
    already holds the request's totals."""
    choice = chunk["choices"][0]
    choice.update(finish_extra(event))
    if check is not None:
        choice["schema_check"] = check
    choice["llamay_usage"] = usage_json([event.usage])
    return chunk


def usage_chunk(rid: str, model: str, created: int, obj: str, usages: list[Usage]) -> dict[str, Any]:
    return {
        "id": rid,
        "object": obj,
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage_json(usages),
    }


# -- the renderers: the chat pipeline's steps as OpenAI's answers (see chat/pipeline.py) ----

NOTHING: tuple[bytes, ...] = ()


def sse_frame(data: Any) -> bytes:
    """One OpenAI stream event: a `data:` line (JSON, or text such as [DONE])."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return f"data: {payload}\n\n".encode()


class Base:
    """What both renderers share: the stream's id, model and creation time, the count of
    choices ended, and (whole) the choices or (streamed) their usages."""

    media_type = SSE
    obj = ""

    def __init__(self, rid: str, model: str, *, streaming: bool, include_usage: bool) -> None:
        self.rid = rid
        self.model = model
        self.streaming = streaming
        self.include_usage = include_usage
        self.created = int(time.time())
        self.n = 1
        self.choices: list[Choice] = []
        self.usages: list[Usage] = []

    def start(self, gen: Generation) -> Sequence[Any]:
        self.n = len(gen.streams)
        return self.opening() if self.streaming else NOTHING

    def opening(self) -> list[bytes]:
        return []

    def done(self, step: Done) -> Sequence[Any]:
        c = step.choice
        if not self.streaming:
            self.choices.append(c)
            if len(self.choices) < self.n:
                return NOTHING
            return [self.body(sorted(self.choices, key=lambda x: x.index))]
        self.usages.append(c.finish.usage)
        frames = self.last(step)
        if len(self.usages) == self.n:
            if self.include_usage:
                usage = usage_chunk(self.rid, self.model, self.created, self.obj, self.usages)
                frames.append(sse_frame(usage))
            frames.append(sse_frame("[DONE]"))
        return frames

    def error(self, exc: LlamayError) -> Sequence[bytes]:
        return [sse_frame(error_body(exc, "openai"))]

    def last(self, step: Done) -> list[bytes]:  # pragma: no cover - each renderer's own
        raise NotImplementedError

    def body(self, choices: list[Choice]) -> dict[str, Any]:  # pragma: no cover - each renderer's own
        raise NotImplementedError


def _delta(piece: Piece) -> dict[str, Any]:
    if piece.kind == "reasoning":
        return {"reasoning_content": piece.text}
    if piece.kind == "content":
        return {"content": piece.text}
    if piece.kind == "call":
        call = {"index": piece.index, "id": piece.id, "type": "function",
                "function": {"name": piece.name, "arguments": ""}}  # fmt: skip
        return {"tool_calls": [call]}
    return {"tool_calls": [{"index": piece.index, "function": {"arguments": piece.text}}]}


def message_json(out: dict[str, Any], choice: Choice) -> None:
    """Fill a whole chat choice `out` with its message (reasoning, tool calls) and its
    schema check (a schema not enforced in full: whether the answer satisfies it)."""
    message = chat_message(choice.content)
    if choice.reasoning:
        message["reasoning_content"] = choice.reasoning
    if choice.calls:
        message["content"] = choice.content or None
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in choice.calls
        ]
        if choice.finish.reason == "stop":
            out["finish_reason"] = "tool_calls"
    out["message"] = message
    if choice.check is not None:
        out["schema_check"] = choice.check


class ChatRenderer(Base):
    """POST /v1/chat/completions. `logprobs`: each token's log-prob goes with its content."""

    obj = "chat.completion.chunk"

    def __init__(self, rid: str, model: str, *, streaming: bool, include_usage: bool, logprobs: bool) -> None:
        super().__init__(rid, model, streaming=streaming, include_usage=include_usage)
        self.logprobs = logprobs

    def _chunk(self, i: int, delta: dict[str, Any], **kw: Any) -> bytes:
        chunk = chat_chunk(
            self.rid, self.model, self.created, i, delta, with_usage_field=self.include_usage, **kw
        )
        return sse_frame(chunk)

    def opening(self) -> list[bytes]:
        return [self._chunk(i, {"role": "assistant", "content": "", "refusal": None}) for i in range(self.n)]

    def delta(self, step: Delta) -> Sequence[bytes]:
        if not self.streaming:
            return NOTHING
        pieces = step.pieces
        if self.logprobs and step.token is not None:
            said = "".join(p.text for p in pieces if p.kind == "content")
            lp = [chat_logprob_json(step.token)]
            first = self._chunk(step.index, {"content": said}, logprobs=lp)
            return [first, *(self._chunk(step.index, _delta(p)) for p in pieces if p.kind != "content")]
        return [self._chunk(step.index, _delta(p)) for p in pieces]

    def last(self, step: Done) -> list[bytes]:
        c = step.choice
        reason = finish_reason(c.finish)
        if c.calls and c.finish.reason == "stop":
            reason = "tool_calls"
        chunk = chat_chunk(
            self.rid,
            self.model,
            self.created,
            c.index,
            {},
            finish=reason,
            with_usage_field=self.include_usage,
        )
        last = finish_chunk(chunk, c.finish, c.check)
        return [self._chunk(c.index, _delta(p)) for p in step.pieces] + [sse_frame(last)]

    def body(self, choices: list[Choice]) -> dict[str, Any]:
        body = chat_response(self.rid, self.model, [(c.text, c.finish, c.tokens) for c in choices])
        for out, choice in zip(body["choices"], choices, strict=True):
            message_json(out, choice)
        return body

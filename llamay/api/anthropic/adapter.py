"""Pure functions between engine records and Anthropic's JSON: messages, usage, stop
reasons, stream events; and `MessageRenderer`, which turns the chat pipeline's steps into
a Messages reply, streamed as Anthropic's SSE events or whole as one message (one
`BlockAssembler` serves both, so the two hold the same blocks). No I/O here, so
everything is tested with golden JSON."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...errors import EngineError, LlamayError
from ...types import FinishEvent, Usage
from ..errors import error_body
from ..http import SSE, sse_event  # `event:` and `data:` lines, as Anthropic frames every event
from .blocks import BlockAssembler

if TYPE_CHECKING:
    from ...chat.pipeline import Choice, Delta, Done, Generation

__all__ = [
    "new_message_id",
    "matched_stop",
    "stop_reason",
    "usage_json",
    "message_json",
    "message_start",
    "message_delta",
    "sse_event",
    "MessageRenderer",
]


def new_message_id() -> str:
    return "msg_" + secrets.token_hex(12)


def matched_stop(raw: bytes, released: str, stops: Sequence[str]) -> str | None:
    """Which stop sequence ended a generation. `raw` is every generated token's bytes,
    `released` the text the engine let out: the engine cuts the text where the earliest
    stop string starts (ties go to the first listed), so what `raw` holds past `released`
    starts with it. None when no stop string did (an end-of-turn token, say)."""
    tail = raw.decode("utf-8", errors="replace")
    if not tail.startswith(released):
        return None
    tail = tail[len(released) :]
    return next((s for s in stops if s and tail.startswith(s)), None)


def stop_reason(event: FinishEvent, *, tool_use: bool, stop_sequence: str | None) -> str:
    """Anthropic's stop_reason for a finished generation (reason "stop" or "length"):
    tool_use when the reply holds calls, stop_sequence when a stop string matched,
    max_tokens at the length limit (requested or the context's), else end_turn."""
    if event.reason == "length":
        return "max_tokens"
    if tool_use or event.reason == "tool_calls":
        return "tool_use"
    return "stop_sequence" if stop_sequence is not None else "end_turn"


def usage_json(usage: Usage, breakpoint: int = 0, *, output: int | None = None) -> dict[str, Any]:
    """Anthropic splits the prompt three ways, which add up to it: cache reads (tokens the
    prefix cache held), cache creation (tokens up to the last breakpoint, `breakpoint`,
    that were not cached) and the rest (`input_tokens`)."""
    cached = max(0, min(usage.cached_tokens, usage.prompt_tokens))
    creation = max(0, min(breakpoint, usage.prompt_tokens) - cached)
    return {
        "input_tokens": usage.prompt_tokens - cached - creation,
        "output_tokens": usage.completion_tokens if output is None else output,
        "cache_creation_input_tokens": creation,
        "cache_read_input_tokens": cached,
    }


def message_json(
    mid: str,
    model: str,
    content: list[dict[str, Any]],
    reason: str | None,
    stop_sequence: str | None,
    usage: dict[str, Any],
) -> dict[str, Any]:
    return {
        "id": mid,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": stop_sequence,
        "usage": usage,
    }


def message_start(mid: str, model: str, prompt_tokens: int) -> dict[str, Any]:
    """The opening event. The prompt's cache split is known only at the end, so this counts
    it all as input; `message_delta` carries the split (cumulative, as Anthropic's does)."""
    usage = usage_json(Usage(prompt_tokens, 0), output=0)
    return {"type": "message_start", "message": message_json(mid, model, [], None, None, usage)}


def message_delta(reason: str, stop_sequence: str | None, usage: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "message_delta",
        "delta": {"stop_reason": reason, "stop_sequence": stop_sequence},
        "usage": usage,
    }


NOTHING: tuple[bytes, ...] = ()


def _check(choice: Choice) -> dict[str, Any]:
    """A schema not enforced in full: say so, and whether the answer satisfies it."""
    return {"schema_check": choice.check} if choice.check is not None else {}


class MessageRenderer:
    """One message (Messages takes no `n`). `stops`: the request's stop sequences (the
    raw token bytes tell which one matched); `mark`: prompt tokens up to the last cache
    breakpoint (for the usage split); `shown` False withholds thinking text."""

    media_type = SSE

    def __init__(
        self,
        mid: str,
        model: str,
        *,
        streaming: bool,
        stops: tuple[str, ...],
        shown: bool,
        mark: int,
        prompt_tokens: int,
    ) -> None:
        self.mid = mid
        self.model = model
        self.streaming = streaming
        self.stops = stops
        self.mark = mark
        self.prompt_tokens = prompt_tokens
        self.blocks = BlockAssembler(shown=shown)
        self.released = ""  # the text the engine let out
        self.raw = b""  # every generated token's bytes

    def start(self, gen: Generation) -> Sequence[bytes]:
        if not self.streaming:
            return NOTHING
        return [
            sse_event(message_start(self.mid, self.model, self.prompt_tokens)),
            sse_event({"type": "ping"}),
        ]

    def delta(self, step: Delta) -> Sequence[bytes]:
        if step.token is not None:
            self.released += step.token.text
            self.raw += step.token.token_bytes
        events = self.blocks.push(step.pieces)
        return [sse_event(e) for e in events] if self.streaming else NOTHING

    def done(self, step: Done) -> Sequence[Any]:
        """Raises EngineError when the engine could not complete the reply."""
        choice = step.choice
        fin = choice.finish
        if fin.reason not in ("stop", "length", "tool_calls"):
            raise EngineError(fin.message or f"generation ended early ({fin.reason})")
        self.released += fin.text
        events = self.blocks.push(step.pieces) + self.blocks.close()
        seq = matched_stop(self.raw, self.released, self.stops) if fin.reason == "stop" else None
        reason = stop_reason(fin, tool_use=self.blocks.has_tool_use, stop_sequence=seq)
        seq = seq if reason == "stop_sequence" else None
        usage = usage_json(choice.usage, self.mark)
        if not self.streaming:
            body = message_json(self.mid, self.model, self.blocks.blocks, reason, seq, usage)
            return [{**body, **_check(choice)}]
        return [
            *(sse_event(e) for e in events),
            sse_event({**message_delta(reason, seq, usage), **_check(choice)}),
            sse_event({"type": "message_stop"}),
        ]

    def error(self, exc: LlamayError) -> Sequence[bytes]:
        return [sse_event(error_body(exc, "anthropic"))]

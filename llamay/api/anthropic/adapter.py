"""Pure functions between engine records and Anthropic's JSON: messages, usage, stop
reasons, stream events and error bodies. No I/O here, so everything is tested with
golden JSON."""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from typing import Any

from ...types import FinishEvent, Usage

__all__ = [
    "new_message_id",
    "matched_stop",
    "stop_reason",
    "usage_json",
    "message_json",
    "message_start",
    "message_delta",
    "sse_event",
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


def sse_event(event: dict[str, Any]) -> bytes:
    """`event: <type>` and `data: <json>` lines, as Anthropic frames every event."""
    data = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
    return f"event: {event['type']}\ndata: {data}\n\n".encode()

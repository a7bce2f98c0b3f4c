"""Pure functions between engine records and Ollama's JSON: chunks, final objects with
their timings, tool calls with object arguments, logprobs. No I/O, so everything is
tested with golden JSON. Model descriptions (tags, ps, show) live in `describe`."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from ...chat.tools import ToolCall
from ...types import FinishEvent, TokenEvent

__all__ = [
    "iso_time",
    "nanos",
    "done_reason",
    "stats_json",
    "call_arguments",
    "tool_calls_json",
    "logprob_json",
    "chat_chunk",
    "chat_final",
    "generate_chunk",
    "generate_final",
    "load_reply",
]

LOGPROB_FLOOR = -9999.0  # JSON has no -inf (a token the constraint forbade)


def iso_time(ts: float) -> str:
    """RFC 3339 in UTC with microseconds, as Ollama writes `created_at`."""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def nanos(seconds: float) -> int:
    return max(0, int(seconds * 1e9))


def done_reason(fin: FinishEvent) -> str:
    """Ollama's "stop" / "length" (tool calls end with "stop" too); anything else the
    engine reports ("abort", "error") is passed on as is."""
    return "stop" if fin.reason == "tool_calls" else fin.reason


def stats_json(fin: FinishEvent, *, load_ns: int, total_ns: int) -> dict[str, int]:
    """The counts and durations (nanoseconds) of a final object. Prompt evaluation runs
    from admission to the first token; generation from there to the end."""
    prompt_ms = float(fin.extra.get("prompt_ms", 0.0))
    generate_ms = float(fin.extra.get("generate_ms", 0.0))
    return {
        "total_duration": total_ns,
        "load_duration": load_ns,
        "prompt_eval_count": fin.usage.prompt_tokens,
        "prompt_eval_duration": int(prompt_ms * 1e6),
        "eval_count": fin.usage.completion_tokens,
        "eval_duration": int(generate_ms * 1e6),
    }


def call_arguments(text: str) -> dict[str, Any] | None:
    """A call's arguments JSON text as an object; None when it is not one (a call cut
    off by the token limit). No arguments at all is {}. A JSON string that encodes an
    object (unconstrained models do that) is decoded once more."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
        if isinstance(value, str):
            value = json.loads(value)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def tool_calls_json(calls: list[ToolCall], first_index: int = 0) -> list[dict[str, Any]]:
    """Ollama's tool calls: arguments are objects. Calls whose arguments are not a whole
    object are left out (the final object's done_reason "length" tells why)."""
    out = []
    for i, call in enumerate(calls, start=first_index):
        args = call_arguments(call.arguments)
        if args is not None:
            out.append({"id": call.id, "function": {"index": i, "name": call.name, "arguments": args}})
    return out


def _lp(value: float | None) -> float:
    return LOGPROB_FLOOR if value is None else max(value, LOGPROB_FLOOR)


def logprob_json(ev: TokenEvent) -> dict[str, Any]:
    text = ev.token_bytes.decode("utf-8", errors="replace")
    return {
        "token": text,
        "logprob": _lp(ev.logprob),
        "bytes": list(ev.token_bytes),
        "top_logprobs": [
            {
                "token": t.text.decode("utf-8", errors="replace"),
                "logprob": _lp(t.logprob),
                "bytes": list(t.text),
            }
            for t in ev.top
        ],
    }


def _message(content: str, thinking: str, tool_calls: list[dict[str, Any]] | None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if thinking:
        message["thinking"] = thinking
    if tool_calls:
        message["tool_calls"] = tool_calls
    return message


def chat_chunk(
    model: str,
    created_at: str,
    *,
    content: str = "",
    thinking: str = "",
    tool_calls: list[dict[str, Any]] | None = None,
    logprobs: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One streamed /api/chat object (done false)."""
    out: dict[str, Any] = {
        "model": model,
        "created_at": created_at,
        "message": _message(content, thinking, tool_calls),
        "done": False,
    }
    if logprobs is not None:
        out["logprobs"] = logprobs
    return out


def chat_final(
    model: str,
    created_at: str,
    fin: FinishEvent,
    stats: dict[str, int],
    *,
    content: str = "",
    thinking: str = "",
    tool_calls: list[dict[str, Any]] | None = None,
    logprobs: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The last /api/chat object: the whole message when not streamed, an empty one after
    a stream; done true, done_reason and the timings."""
    out = chat_chunk(
        model, created_at, content=content, thinking=thinking, tool_calls=tool_calls, logprobs=logprobs
    )
    out["done"] = True
    out["done_reason"] = done_reason(fin)
    out.update(stats)
    return out


def generate_chunk(
    model: str,
    created_at: str,
    *,
    response: str = "",
    thinking: str = "",
    logprobs: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One streamed /api/generate object (done false)."""
    out: dict[str, Any] = {"model": model, "created_at": created_at, "response": response}
    if thinking:
        out["thinking"] = thinking
    out["done"] = False
    if logprobs is not None:
        out["logprobs"] = logprobs
    return out


def generate_final(
    model: str,
    created_at: str,
    fin: FinishEvent,
    stats: dict[str, int],
    *,
    response: str = "",
    thinking: str = "",
    context: list[int] | None = None,
    logprobs: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The last /api/generate object; `context` (prompt + reply token ids) is what the
    next request may send back to continue (absent in raw mode, as in Ollama)."""
    out = generate_chunk(model, created_at, response=response, thinking=thinking, logprobs=logprobs)
    out["done"] = True
    out["done_reason"] = done_reason(fin)
    if context is not None:
        out["context"] = context
    out.update(stats)
    return out


def load_reply(model: str, created_at: str, *, chat: bool, reason: str) -> dict[str, Any]:
    """The answer to an empty chat / generate: `reason` "load" or "unload"."""
    out: dict[str, Any] = {"model": model, "created_at": created_at}
    if chat:
        out["message"] = {"role": "assistant", "content": ""}
    else:
        out["response"] = ""
    out["done"] = True
    out["done_reason"] = reason
    return out

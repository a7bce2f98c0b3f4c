"""What the library returns: plain frozen dataclasses, the same in process and remote."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["ChatResult", "Chunk", "ChunkKind", "ScoreResult", "Timings", "ToolCall", "Usage"]

ChunkKind = Literal["content", "reasoning", "tool_call", "tool_result"]


@dataclass(frozen=True)
class Usage:
    """Tokens read and written. `cached`: prompt tokens whose KV was reused, not
    recomputed. Over a tool loop, the sum of every round."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.cached + other.cached,
        )


@dataclass(frozen=True)
class Timings:
    """Milliseconds. In process, the engine's own figures: `queue_ms` waiting for a slot,
    `prompt_ms` reading the prompt (to the first token), `generate_ms` from the first token
    to the end. Remote, measured by the client: `prompt_ms` is the time to the first
    token, network included, and `queue_ms` is 0. `total_ms` is wall time of the call.
    Over a tool loop, the sum of every round (tool calls themselves excluded)."""

    prompt_ms: float = 0.0
    generate_ms: float = 0.0
    queue_ms: float = 0.0
    total_ms: float = 0.0

    def __add__(self, other: Timings) -> Timings:
        return Timings(
            self.prompt_ms + other.prompt_ms,
            self.generate_ms + other.generate_ms,
            self.queue_ms + other.queue_ms,
            self.total_ms + other.total_ms,
        )


@dataclass(frozen=True)
class ToolCall:
    """A call the model made: `arguments` decoded from JSON (valid under the tool's
    schema: it was enforced while sampling). With `run_tools`, `result` is what the
    function returned (or `{"error": ...}` when it raised) and `ran` is True."""

    id: str
    name: str
    arguments: dict[str, Any]
    result: Any = None
    ran: bool = False


@dataclass(frozen=True)
class ChatResult:
    """One answer. `text` is the answer's content, `reasoning` the model's thinking
    (kept apart), `parsed` the value of the requested output type (None without
    `output=`), `tool_calls` every call made (over all rounds of a tool loop),
    `finish_reason` "stop", "length", "tool_calls" (calls returned, not run) or "abort".
    `messages` is the conversation including this answer, ready for the next turn."""

    text: str
    reasoning: str = ""
    parsed: Any = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str = "stop"
    usage: Usage = field(default_factory=Usage)
    timings: Timings = field(default_factory=Timings)
    messages: list[dict[str, Any]] = field(default_factory=list)
    finish_message: str | None = None

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Chunk:
    """One streamed piece. A "content" chunk carries answer `text`, a "reasoning" chunk
    `reasoning` text (so printing every chunk's `text` prints only the answer); a
    "tool_call" chunk is a complete call the model made (`call`), a "tool_result" chunk
    the same call after it ran (`call.result`)."""

    text: str = ""
    reasoning: str = ""
    kind: ChunkKind = "content"
    call: ToolCall | None = None

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class ScoreResult:
    """A continuation scored after a prompt: its `tokens` (as text), each token's
    log-probability under the model given everything before it, their sum `total`, and
    `greedy`: every token is the model's most likely choice at its position (so greedy
    decoding would produce exactly this continuation)."""

    continuation: str
    tokens: list[str]
    logprobs: list[float]
    total: float
    greedy: bool

"""What an LLM's two modes have in common: a `Backend` runs one round of generation (and
completions, scores, contexts) on the LLM's loop. `LocalBackend` drives the in-process
engine through the chat pipeline; `RemoteBackend` speaks HTTP to a llamay server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from .options import Ask, ContextHandle, Options
from .results import Chunk, ScoreResult, Timings, ToolCall, Usage

__all__ = ["Backend", "Reply", "ContextHandle"]  # ContextHandle: re-exported from options


@dataclass(frozen=True)
class Reply:
    """One finished round: the answer's `content` and `reasoning`, the tool `calls` the
    model made (arguments decoded; `raw_arguments` as generated, for the history)."""

    content: str
    reasoning: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    raw_arguments: list[str] = field(default_factory=list)
    finish_reason: str = "stop"
    usage: Usage = field(default_factory=Usage)
    timings: Timings = field(default_factory=Timings)
    finish_message: str | None = None


class Backend(Protocol):
    """Every method runs on the LLM's loop; errors are LlamayError."""

    name: str

    def generate(self, ask: Ask) -> AsyncIterator[Chunk | Reply]:
        """Stream one round: content and reasoning chunks, then the Reply."""
        ...

    async def generate_many(self, asks: list[Ask]) -> list[Reply]:
        """Rounds submitted together (they share decode steps), replies in order."""
        ...

    async def complete(self, prompts: list[str], opts: Options) -> list[Reply]:
        """Plain-text continuations of raw prompts (no chat template), submitted together."""
        ...

    async def score(self, prompt: str, continuations: list[str]) -> list[ScoreResult]:
        """Log-probabilities of each continuation after `prompt`, scored together."""
        ...

    async def open_context(self, messages: list[dict[str, Any]]) -> ContextHandle:
        """Compute `messages` once as a prefix later turns continue."""
        ...

    async def fork_context(self, handle: ContextHandle, messages: list[dict[str, Any]]) -> ContextHandle: ...

    async def close_context(self, handle: ContextHandle) -> None: ...

    async def stats(self) -> dict[str, Any]:
        """Engine figures: requests, prompt/cached/generated tokens, decode steps."""
        ...

    async def aclose(self) -> None: ...

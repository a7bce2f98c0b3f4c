"""What Ollama reports of a reply: thinking, content and tool calls whose arguments are
objects. A call is reported whole, once complete: when the next call
starts, or at the end."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...chat.flow import Piece
from ...chat.tools import ToolCall
from .adapter import tool_calls_json

__all__ = ["Reply", "Step"]


@dataclass
class Step:
    """What one push (or the finish) made visible."""

    thinking: str = ""
    content: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.thinking or self.content or self.tool_calls)


class Reply:
    """What Ollama reports of one generation, from the pipeline's pieces and the tool calls
    parsed so far. `show_thinking` False drops reasoning (think: false)."""

    def __init__(self, *, show_thinking: bool = True) -> None:
        self._show_thinking = show_thinking
        self._reported = 0  # calls already reported
        self.thinking = ""
        self.content = ""
        self.tool_calls: list[dict[str, Any]] = []

    def step(self, pieces: list[Piece], calls: list[ToolCall], *, final: bool) -> Step:
        """`pieces` made visible now; `calls` are every call parsed so far; `final` at the end."""
        step = Step()
        started = self._reported
        for p in pieces:
            if p.kind == "reasoning" and self._show_thinking:
                step.thinking += p.text
            elif p.kind == "content":
                step.content += p.text
            elif p.kind == "call":
                started = max(started, p.index)
        done = len(calls) if final else min(started, len(calls))
        if done > self._reported:
            step.tool_calls = tool_calls_json(calls[self._reported : done], first_index=self._reported)
            self._reported = done
        self.thinking += step.thinking
        self.content += step.content
        self.tool_calls += step.tool_calls
        return step

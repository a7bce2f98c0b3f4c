"""Generated text split into what Ollama reports: thinking, content and tool calls whose
arguments are objects. A call is reported whole, once complete: when the next call
starts, or at the end."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..chatflow import ChatOutput, ChatSetup
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
    """Splits one generation. `setup` None: plain text (raw prompts, custom templates),
    all content. `show_thinking` False drops reasoning (think: false)."""

    def __init__(self, setup: ChatSetup | None, *, show_thinking: bool = True) -> None:
        self._out: ChatOutput | None = setup.output() if setup is not None else None
        self._show_thinking = show_thinking
        self._reported = 0  # calls already reported
        self.thinking = ""
        self.content = ""
        self.tool_calls: list[dict[str, Any]] = []

    def push(self, text: str) -> Step:
        if self._out is None:
            self.content += text
            return Step(content=text)
        return self._step(self._out.push(text), final=False)

    def finish(self) -> Step:
        if self._out is None:
            return Step()
        return self._step(self._out.finish(), final=True)

    def _step(self, pieces: list[Any], *, final: bool) -> Step:
        step = Step()
        started = self._reported
        for p in pieces:
            if p.kind == "reasoning" and self._show_thinking:
                step.thinking += p.text
            elif p.kind == "content":
                step.content += p.text
            elif p.kind == "call":
                started = max(started, p.index)
        assert self._out is not None
        calls = self._out.calls
        done = len(calls) if final else min(started, len(calls))
        if done > self._reported:
            step.tool_calls = tool_calls_json(calls[self._reported : done], first_index=self._reported)
            self._reported = done
        self.thinking += step.thinking
        self.content += step.content
        self.tool_calls += step.tool_calls
        return step

"""What Ollama reports of a reply: thinking, content and tool calls whose arguments are
objects. A call is reported whole, once complete: when the next call
starts, or at the end. `OllamaRenderer` turns the chat pipeline's steps into /api/chat's
and /api/generate's NDJSON chunks and final object, or the final object alone."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...chat.flow import Piece
from ...chat.tools import ToolCall
from ...errors import LlamayError
from ...types import FinishEvent
from ..errors import error_body
from ..http import NDJSON, ndjson_line
from . import adapter
from .adapter import tool_calls_json

if TYPE_CHECKING:
    from ...chat.pipeline import Choice, Delta, Done, Generation

__all__ = ["Reply", "Step", "OllamaRenderer"]


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


NOTHING: tuple[bytes, ...] = ()


def _check(choice: Choice) -> dict[str, Any]:
    """A schema not enforced in full: say so, and whether the answer satisfies it."""
    return {"schema_check": choice.check} if choice.check is not None else {}


def _no_calls(index: int) -> list[ToolCall]:
    return []


class OllamaRenderer:
    """One reply (`chat`: /api/chat's shapes, else /api/generate's) of model `name`.
    `context`: the prompt tokens the final object's `context` starts with (None: no
    `context`: chat, raw or fill-in-the-middle generate). `t0`: when the request came in
    (perf_counter), `load_ns`: what loading the model took, both for the timings."""

    media_type = NDJSON

    def __init__(
        self,
        name: str,
        *,
        chat: bool,
        streaming: bool,
        thinking: bool,
        logprobs: bool,
        t0: float,
        load_ns: int,
        context: list[int] | None = None,
    ) -> None:
        self.name = name
        self.chat = chat
        self.streaming = streaming
        self.logprobs = logprobs
        self.t0 = t0
        self.load_ns = load_ns
        self.context = context
        self.reply = Reply(show_thinking=thinking)
        self.generated: list[int] = []
        self._calls: Callable[[int], list[ToolCall]] = _no_calls

    def start(self, gen: Generation) -> Sequence[bytes]:
        self._calls = gen.calls  # the calls parsed so far, one in progress included
        return NOTHING

    def delta(self, step: Delta) -> Sequence[bytes]:
        if not self.streaming:
            return NOTHING
        lps = None
        if step.token is not None:
            self.generated.append(step.token.token)
            lps = [adapter.logprob_json(step.token)] if self.logprobs else None
        shown = self.reply.step(step.pieces, self._calls(0), final=False)
        return [ndjson_line(self._chunk(shown, lps))] if shown or lps else NOTHING

    def done(self, step: Done) -> Sequence[Any]:
        choice = step.choice
        if not self.streaming:
            pieces = [Piece("reasoning", choice.reasoning), Piece("content", choice.content)]
            self.reply.step(pieces, choice.calls, final=True)
            whole = Step(self.reply.thinking, self.reply.content, self.reply.tool_calls)
            events = choice.tokens or []
            lps = [adapter.logprob_json(e) for e in events] if self.logprobs else None
            return [{**self._final(choice.finish, whole, lps, [e.token for e in events]), **_check(choice)}]
        shown = self.reply.step(step.pieces, choice.calls, final=True)
        lines = [ndjson_line(self._chunk(shown, None))] if shown else []
        final = self._final(choice.finish, Step(), None, self.generated)
        return [*lines, ndjson_line({**final, **_check(choice)})]

    def error(self, exc: LlamayError) -> Sequence[bytes]:
        return [ndjson_line(error_body(exc, "ollama"))]

    def _chunk(self, step: Step, lps: list[dict[str, Any]] | None) -> dict[str, Any]:
        now = adapter.iso_time(time.time())
        if self.chat:
            return adapter.chat_chunk(
                self.name, now, content=step.content, thinking=step.thinking, tool_calls=step.tool_calls,
                logprobs=lps,
            )  # fmt: skip
        return adapter.generate_chunk(
            self.name, now, response=step.content, thinking=step.thinking, logprobs=lps
        )

    def _final(
        self, fin: FinishEvent, step: Step, lps: list[dict[str, Any]] | None, generated: list[int]
    ) -> dict[str, Any]:
        now = adapter.iso_time(time.time())
        total = adapter.nanos(time.perf_counter() - self.t0)
        stats = adapter.stats_json(fin, load_ns=self.load_ns, total_ns=total)
        if self.chat:
            return adapter.chat_final(
                self.name, now, fin, stats, content=step.content, thinking=step.thinking,
                tool_calls=step.tool_calls, logprobs=lps,
            )  # fmt: skip
        context = self.context + generated if self.context is not None else None
        return adapter.generate_final(
            self.name, now, fin, stats, response=step.content, thinking=step.thinking, context=context,
            logprobs=lps,
        )  # fmt: skip

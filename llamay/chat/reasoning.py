"""Splitting a reasoning model's output into its thinking and its answer.

Models such as DeepSeek R1 and Qwen 3 think inside `<think>...</think>` before
answering. `ReasoningParser` separates the two while streaming; `detect_reasoning`
finds which markers a model's chat template declares.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["ReasoningMarkers", "ReasoningParser", "detect_reasoning", "KNOWN_MARKERS"]

# (open, close) pairs, most specific first; each is checked in the template text.
KNOWN_MARKERS = (
    ("<|START_THINKING|>", "<|END_THINKING|>"),  # Command R7B
    ("[THINK]", "[/THINK]"),  # Magistral
    ("<think>", "</think>"),  # DeepSeek R1, Qwen 3, QwQ, and most distills
)


@dataclass(frozen=True)
class ReasoningMarkers:
    """A model's think-block markers, with their token ids when each is a single
    special token of the vocabulary (e.g. for a thinking budget that forces the close)."""

    open_tag: str = "<think>"
    close_tag: str = "</think>"
    open_token: int | None = None
    close_token: int | None = None

    def opened_by(self, prompt: str) -> bool:
        """The rendered prompt ends inside an open think block (the template's
        generation prompt already wrote the open tag): parse with `started=True`."""
        tail = prompt.rstrip()
        return tail.endswith(self.open_tag)

    def parser(self, *, started: bool = False) -> ReasoningParser:
        return ReasoningParser(self.open_tag, self.close_tag, started=started)


def detect_reasoning(
    template_source: str | None, special: Callable[[str], int | None]
) -> ReasoningMarkers | None:
    """The think markers the chat template mentions, or (for templates that never
    mention them) a <think>/</think> pair that is special tokens of the vocabulary.
    None when the model shows no sign of a think block."""
    src = template_source or ""
    for open_tag, close_tag in KNOWN_MARKERS:
        if open_tag in src or close_tag in src:
            return ReasoningMarkers(open_tag, close_tag, special(open_tag), special(close_tag))
    open_token, close_token = special("<think>"), special("</think>")
    if open_token is not None and close_token is not None:
        return ReasoningMarkers("<think>", "</think>", open_token, close_token)
    return None


class ReasoningParser:
    """Streams generated text into (reasoning, content) pieces.

    A think block counts only at the very start of the output (after optional
    whitespace), or from the first character when `started` (the prompt opened it). The
    reasoning excludes the tags and the whitespace around its text; the content excludes
    the whitespace right after the close tag. An unclosed block is all reasoning. Held
    back at any moment: a possible prefix of the next marker and a whitespace run (whose
    fate depends on what follows), so every split of the same text gives the same result.
    """

    def __init__(
        self, open_tag: str = "<think>", close_tag: str = "</think>", *, started: bool = False
    ) -> None:
        if not open_tag or not close_tag:
            raise ValueError("think markers must be non-empty")
        self.open_tag = open_tag
        self.close_tag = close_tag
        self._state = "think" if started else "start"  # start | think | answer
        self._buf = ""
        self._fresh = True  # at the start of the reasoning or of the answer: drop whitespace
        self.reasoning = ""
        self.content = ""

    def push(self, text: str) -> tuple[str, str]:
        """(reasoning delta, content delta) for the next generated `text`."""
        self._buf += text
        reasoning = content = ""
        if self._state == "start":
            head = self._buf.lstrip()
            if head.startswith(self.open_tag):
                self._state, self._buf = "think", head[len(self.open_tag) :]
            elif not self.open_tag.startswith(head):
                self._state, self._fresh = "answer", False
            # else: still possibly the open tag (or only whitespace so far): hold
        if self._state == "think":
            i = self._buf.find(self.close_tag)
            if i >= 0:
                reasoning = self._lead(self._buf[:i]).rstrip()
                self._state, self._buf, self._fresh = "answer", self._buf[i + len(self.close_tag) :], True
            else:
                keep = _prefix_len(self._buf, self.close_tag)
                body, tail = self._buf[: len(self._buf) - keep], self._buf[len(self._buf) - keep :]
                released = self._lead(body).rstrip()
                # A whitespace run is held: dropped if the close tag follows it.
                self._buf = body[len(body.rstrip()) :] + tail if released or not self._fresh else tail
                reasoning = released
        if self._state == "answer":
            content, self._buf = self._lead(self._buf), ""
        return self._record(reasoning, content)

    def finish(self) -> tuple[str, str]:
        """Release what was held back at the end of the output."""
        buf, self._buf = self._buf, ""
        if self._state == "think":  # never closed: all reasoning, minus trailing whitespace
            return self._record(self._lead(buf).rstrip(), "")
        if self._state == "start":
            return self._record("", buf)  # only whitespace or an unfinished open tag
        return self._record("", "")

    def _lead(self, text: str) -> str:
        """Drop the whitespace that opens the reasoning or the answer after a block."""
        if self._fresh:
            text = text.lstrip()
            if text:
                self._fresh = False
        return text

    def _record(self, reasoning: str, content: str) -> tuple[str, str]:
        self.reasoning += reasoning
        self.content += content
        return reasoning, content


def _prefix_len(text: str, tag: str) -> int:
    """Length of the longest tail of `text` that is a proper prefix of `tag`."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0

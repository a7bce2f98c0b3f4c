"""Chat pipeline pieces -> Anthropic content blocks, as stream events and as the final
list. Pure. One assembler serves both paths, so a streamed reply and a whole one hold
the same blocks.

Contract: pieces of one kind in a row form one block ("reasoning" -> thinking,
"content" -> text, "call" + its "args" -> tool_use). A text block opens only once it
holds non-whitespace, so whitespace between thinking and a tool call makes no block.
A thinking block ends with a `signature_delta` (an opaque digest of its text). Tool ids
read "toolu_...". A tool_use whose input JSON was cut off by max_tokens reports what it
has, parsed as far as it goes, in the final list (the stream carries the fragments).
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from ...chat.flow import Piece
from .partial import parse_partial

__all__ = ["BlockAssembler", "signature", "tool_id"]


def signature(thinking: str) -> str:
    """The opaque `signature` of a thinking block: deterministic, so stream == whole."""
    return base64.b64encode(hashlib.sha256(b"llamay-thinking\0" + thinking.encode()).digest()).decode()


def tool_id(call_id: str) -> str:
    return "toolu_" + call_id.removeprefix("call_")


def _input(args: str) -> dict[str, Any]:
    value = parse_partial(args) if args.strip() else {}
    return value if isinstance(value, dict) else {}


class BlockAssembler:
    """Feed `push(pieces)` then `close()`; each returns the stream events (dicts with a
    `type`) that the pieces complete. `blocks` is the content so far. `shown` False
    withholds thinking text (display "omitted") but still signs it."""

    def __init__(self, *, shown: bool = True) -> None:
        self.blocks: list[dict[str, Any]] = []
        self.shown = shown
        self._kind: str | None = None  # kind of the open block, if any
        self._held = ""  # leading whitespace of a text block not opened yet
        self._thought = ""
        self._args = ""

    @property
    def has_tool_use(self) -> bool:
        return any(b["type"] == "tool_use" for b in self.blocks)

    def push(self, pieces: list[Piece]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for p in pieces:
            if p.kind == "reasoning":
                events += self._reasoning(p.text)
            elif p.kind == "content":
                events += self._text(p.text)
            elif p.kind == "call":
                self._held = ""
                events += self._end()
                block = {"type": "tool_use", "id": tool_id(p.id), "name": p.name, "input": {}}
                events += self._start("tool_use", block)
            elif p.kind == "args" and self._kind == "tool_use":
                self._args += p.text
                events.append(self._delta({"type": "input_json_delta", "partial_json": p.text}))
        return events

    def close(self) -> list[dict[str, Any]]:
        self._held = ""
        return self._end()

    def _reasoning(self, text: str) -> list[dict[str, Any]]:
        self._held = ""
        events = (
            []
            if self._kind == "thinking"
            else self._end() + self._start("thinking", {"type": "thinking", "thinking": "", "signature": ""})
        )
        self._thought += text
        if self.shown:
            self.blocks[-1]["thinking"] += text
            events.append(self._delta({"type": "thinking_delta", "thinking": text}))
        return events

    def _text(self, text: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if self._kind != "text":
            if self._kind is not None:
                events += self._end()
            if not (self._held + text).strip():
                self._held += text
                return events
            text, self._held = self._held + text, ""
            events += self._start("text", {"type": "text", "text": ""})
        self.blocks[-1]["text"] += text
        events.append(self._delta({"type": "text_delta", "text": text}))
        return events

    def _start(self, kind: str, block: dict[str, Any]) -> list[dict[str, Any]]:
        self._kind = kind
        self.blocks.append(block)
        return [{"type": "content_block_start", "index": len(self.blocks) - 1, "content_block": dict(block)}]

    def _delta(self, delta: dict[str, Any]) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": len(self.blocks) - 1, "delta": delta}

    def _end(self) -> list[dict[str, Any]]:
        """Close the open block."""
        if self._kind is None:
            return []
        events = []
        block = self.blocks[-1]
        if self._kind == "thinking":
            block["signature"] = signature(self._thought)
            events.append(self._delta({"type": "signature_delta", "signature": block["signature"]}))
            self._thought = ""
        elif self._kind == "tool_use":
            block["input"] = _input(self._args)
            self._args = ""
        self._kind = None
        return events + [{"type": "content_block_stop", "index": len(self.blocks) - 1}]

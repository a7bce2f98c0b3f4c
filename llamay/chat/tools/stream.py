"""`ToolStreamParser`: splits generated content into text and tool calls as it streams.

Text is released as soon as it cannot be the start of a call marker: the parser holds
back only a possible marker prefix, plus a whitespace run (dropped when a call follows,
so "Sure.\\n\\n<tool_call>" reports "Sure."). Inside a call block the JSON is scanned
incrementally (see Block): a call is reported once its name is complete, and its
arguments are passed on as generated, so the fragments of one call concatenate to its
arguments JSON text exactly. Results never depend on how the text was split.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable

from .block import Block, CallRecord, CallSyntax
from .deltas import ContentDelta, Delta, coalesce
from .spec import ToolCall, ToolSpec

__all__ = ["ToolStreamParser", "new_call_id"]


def new_call_id() -> str:
    """An OpenAI-style call id: "call_" and 24 random hex digits."""
    return "call_" + secrets.token_hex(12)


class ToolStreamParser:
    """One generation's content -> ContentDelta / ToolCallStart / ToolArgsDelta.

    Calls to names outside `tools` are not reported: their raw text becomes content (a
    constrained run cannot produce them). A call to `finish_tool` is not reported
    either: the decoded value of its `summary` argument is streamed as content.
    `push` and `finish` return deltas in order; call `finish` once at the end.
    """

    def __init__(self, syntax: CallSyntax, tools: Iterable[ToolSpec], finish_tool: str | None = None,
                 new_id: Callable[[], str] = new_call_id) -> None:  # fmt: skip
        self._syntax = syntax
        self._names = {t.name for t in tools}
        self._finish_tool = finish_tool
        self._new_id = new_id
        self._records: list[CallRecord] = []
        self._content: list[str] = []
        self._out: list[Delta] = []
        self._pending = ""  # content not yet released: whitespace + a possible marker prefix
        self._after_call = False  # separators here follow a call block: drop them
        self._mode = "lead" if syntax.whole_output else "content"  # lead|content|block|close
        self._block: Block | None = None
        self._closing = ""  # text matched so far in "close" mode
        self._done = False

    @property
    def calls(self) -> list[ToolCall]:
        """Reported calls so far (arguments as far as generated)."""
        return [ToolCall(r.id, r.name, "".join(r.arguments)) for r in self._records]

    @property
    def content(self) -> str:
        """All content released so far."""
        return "".join(self._content)

    def push(self, text: str) -> list[Delta]:
        """Deltas that `text` (the next generated characters) completes."""
        if self._done:
            raise RuntimeError("push() after finish()")
        rest: str | None = text
        while rest:
            rest = self._step(rest)
        return self._take()

    def finish(self) -> list[Delta]:
        """The output ended: release held text; a cut-off call keeps its partial
        arguments (the caller reports finish_reason "length")."""
        if self._done:
            return []
        self._done = True
        if self._mode == "block" and self._block is not None:
            self._block.finish()
        elif self._mode in ("content", "lead"):
            self._release(self._pending)
        self._pending = ""
        return self._take()

    # -- modes ---------------------------------------------------------------------------

    def _step(self, text: str) -> str | None:
        """Consume a prefix of `text` in the current mode; return what is left for the
        next mode (None when all was consumed)."""
        if self._mode == "lead":
            stripped = text.lstrip(self._syntax.separators)
            if not stripped:
                self._pending += text
                return None
            self._mode = "content"
            if stripped[0] == "{":
                self._pending = ""
                self._open_block("", "")
                return stripped
            return text
        if self._mode == "block":
            return self._feed_block(text)
        if self._mode == "close":
            return self._match_close(text)
        return self._scan_content(text)

    def _scan_content(self, text: str) -> str | None:
        pending = self._pending + text
        best: tuple[int, int, str, str] | None = None
        for opener, replay in self._syntax.openers:
            i = pending.find(opener)
            if i >= 0 and (best is None or (i, -len(opener)) < (best[0], -best[1])):
                best = (i, len(opener), opener, replay)
        if best is not None:
            i, n, opener, replay = best
            self._release(pending[:i], boundary=True)
            self._pending = ""
            self._open_block(opener, replay)
            return pending[i + n :]
        keep = self._marker_prefix(pending)
        cut = len(pending) - keep
        while cut > 0 and pending[cut - 1].isspace():
            cut -= 1  # hold a whitespace run: dropped if a call follows
        self._release(pending[:cut])
        self._pending = pending[cut:]
        return None

    def _marker_prefix(self, text: str) -> int:
        """Length of the longest tail of `text` that could grow into an opener."""
        best = 0
        for opener, _ in self._syntax.openers:
            for n in range(min(len(opener) - 1, len(text)), best, -1):
                if opener.startswith(text[-n:]):
                    best = n
                    break
        return best

    def _open_block(self, opener: str, replay: str) -> None:
        self._mode = "block"
        self._block = Block(
            self._syntax, opener, replay, self._report, self._finish_tool, self._out, self._records
        )

    def _feed_block(self, text: str) -> str | None:
        assert self._block is not None
        rest = self._block.feed(text)
        if rest is None:
            return None
        failed, self._block = self._block.failed, None
        if failed:  # not JSON after all (unconstrained output): the rest is content
            self._mode, self._after_call = "content", False
            return rest
        self._mode = "close" if self._syntax.close else "content"
        self._after_call = True
        return rest

    def _match_close(self, text: str) -> str | None:
        close = self._syntax.close
        for k, ch in enumerate(text):
            if not self._closing and ch.isspace():
                continue
            self._closing += ch
            if self._closing == close:
                self._mode, self._closing = "content", ""
                return text[k + 1 :]
            if not close.startswith(self._closing):
                # Not the closing marker (unconstrained output): treat it as content.
                self._mode, self._after_call = "content", False
                self._pending, self._closing = self._closing, ""
                return text[k + 1 :]
        return None

    # -- output --------------------------------------------------------------------------

    def _release(self, text: str, *, boundary: bool = False) -> None:
        """Release content. Separators right after a call block are dropped, and so is
        whitespace right before one (`boundary`)."""
        if self._after_call:
            text = text.lstrip(self._syntax.separators)
        if boundary:
            text = text.rstrip()
        if text:
            self._after_call = False
            self._out.append(ContentDelta(text))

    def _report(self, name: str) -> tuple[int, str] | None:
        if name not in self._names:
            return None
        return len(self._records), self._new_id()

    def _take(self) -> list[Delta]:
        out = coalesce(self._out)
        self._out.clear()
        self._content.extend(d.text for d in out if isinstance(d, ContentDelta))
        return out

"""`ToolStreamParser`: splits generated content into text and tool calls as it streams.

Text is released as soon as it cannot be the start of a call marker: the parser holds
back only a possible marker prefix, plus a whitespace run (dropped when a call follows,
so "Sure.\\n\\n<tool_call>" reports "Sure."). What follows a marker is the format's
block program (see program.py; by default one JSON value scanned by block.Block): a
call is reported once its name is complete, and its arguments are passed on as
generated, so the fragments of one call concatenate to its arguments JSON text exactly.
Results never depend on how the text was split.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable

from .block import Block, CallRecord, CallSyntax
from .deltas import ContentDelta, Delta, coalesce
from .program import BlockIO, JsonCalls, Opt, Program, ProgramBlock
from .spec import ToolCall, ToolSpec

__all__ = ["ToolStreamParser", "json_program", "new_call_id"]


def new_call_id() -> str:
    """An OpenAI-style call id: "call_" and 24 random hex digits."""
    return "call_" + secrets.token_hex(12)


def json_program(io: BlockIO, opener: str, syntax: CallSyntax) -> Program:
    """The default block: one JSON value (part of the opener replayed into it), then the
    syntax's closing marker if the text goes on with it."""
    replay = dict(syntax.openers).get(opener, "")
    yield JsonCalls(syntax, replay, io)
    if syntax.close:
        yield Opt([syntax.close])


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
        self._mode = "lead" if syntax.whole_output else "content"  # lead|content|block
        self._block: ProgramBlock | None = None
        self._done = False
        if syntax.lead:
            self._open_block("")

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
        while self._mode == "block" and self._block is not None:
            left: str | None = self._block.finish()
            self._close_block()
            while left:
                left = self._step(left)
        if self._mode in ("content", "lead"):
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
                self._open_block("")
                return stripped
            return text
        if self._mode == "block":
            return self._feed_block(text)
        return self._scan_content(text)

    def _scan_content(self, text: str) -> str | None:
        pending = self._pending + text
        best: tuple[int, int, str] | None = None
        for opener, _ in self._syntax.openers:
            i = pending.find(opener)
            if i >= 0 and (best is None or (i, -len(opener)) < (best[0], -best[1])):
                best = (i, len(opener), opener)
        if best is not None:
            i, n, opener = best
            self._release(pending[:i], boundary=True)
            self._pending = ""
            self._open_block(opener)
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

    def _open_block(self, opener: str) -> None:
        syntax = self._syntax
        io = BlockIO(self._report, self._finish_tool, self._out, self._records, self._json_block)
        if syntax.program is not None:
            program = syntax.program
        else:

            def program(io: BlockIO, opener: str) -> Program:
                return json_program(io, opener, syntax)

        self._mode = "block"
        self._block = ProgramBlock(program, opener, io)

    def _json_block(self, syntax: CallSyntax, replay: str) -> Block:
        return Block(syntax, replay, self._report, self._finish_tool, self._out, self._records)

    def _feed_block(self, text: str) -> str | None:
        assert self._block is not None
        rest = self._block.feed(text)
        if rest is None:
            return None
        self._close_block()
        return rest

    def _close_block(self) -> None:
        assert self._block is not None
        # After a block that was not a call, nothing is dropped; after calls, separators are.
        self._after_call = not self._block.failed
        self._mode, self._block = "content", None

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

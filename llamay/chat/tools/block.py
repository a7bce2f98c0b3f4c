"""A JSON call block of the stream parser: the JSON after an opening marker, scanned as
it arrives, turned into call starts, argument fragments and content.

Which JSON values are calls is the format's `CallSyntax`: the path pattern of call
objects (`()` the root object, `("*",)` each array element, ...), the keys holding the
name and the arguments and, for the generic format, the path of a plain `response`
string. A format whose calls are not one JSON value gives a `program` instead (see
program.py), which may still use this scanner for the JSON parts.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .deltas import ContentDelta, Delta, ToolArgsDelta, ToolCallStart
from .jsonscan import JsonScanner, Path

if TYPE_CHECKING:
    from .program import BlockIO, Program

__all__ = ["CallSyntax", "Block", "CallRecord", "SummaryListener", "decoded_args"]


@dataclass(frozen=True)
class CallSyntax:
    """How a format's calls appear in generated text.

    `openers`: (text that opens a call block in content, text replayed into the JSON
    scanner, i.e. the part of the marker that already belongs to the JSON). `close`:
    literal expected after the JSON value. `call_path`: path pattern of call objects,
    "*" matching any array index. `name_keys` / `args_keys`: keys holding the name and
    the arguments. `response_path`: a string value streamed as content. `whole_output`:
    the entire output is one JSON value (no opener). `separators`: dropped next to call
    blocks. `program`: what follows an opener, when it is not one JSON value (called
    with the block's io and the opener that matched; the JSON fields then only serve
    the program). `lead`: the output starts inside a block (the prompt wrote its
    opener).
    """

    openers: tuple[tuple[str, str], ...] = ()
    close: str = ""
    call_path: tuple[str, ...] = ()
    name_keys: tuple[str, ...] = ("name",)
    args_keys: tuple[str, ...] = ("arguments",)
    response_path: Path | None = None
    whole_output: bool = False
    separators: str = " \t\r\n"
    program: Callable[[BlockIO, str], Program] | None = None
    lead: bool = False
    silent_names: tuple[str, ...] = ()

    def is_call(self, path: Path) -> bool:
        return len(path) == len(self.call_path) and all(
            p == q or (q == "*" and isinstance(p, int)) for p, q in zip(path, self.call_path, strict=True)
        )


@dataclass
class CallRecord:
    """A call in progress. `index` is set once it is reported (known tool name)."""

    start: int
    name: str = ""
    named: bool = False
    index: int | None = None
    id: str = ""
    finish: bool = False
    args_start: int | None = None
    args_end: int | None = None
    args_container: bool = False
    args_sent: int = 0  # block position up to which arguments were passed on
    arguments: list[str] = field(default_factory=list)
    summary: JsonScanner | None = None


def decoded_args(raw: str) -> str:
    """Arguments given as a JSON string that holds JSON (unconstrained models do that):
    the inner text; anything else as it is."""
    try:
        value = json.loads(raw)
        if isinstance(value, str):
            json.loads(value)
            return value
    except (ValueError, RecursionError):  # not JSON, or nested deeper than Python parses
        pass
    return raw


class SummaryListener:
    """Listens to a finish call's arguments and streams its `summary` string."""

    def __init__(self, out: list[Delta]) -> None:
        self.out = out

    def start(self, path: Path, pos: int, char: str) -> None:
        pass

    def end(self, path: Path, pos: int) -> None:
        pass

    def text(self, path: Path, chunk: str) -> None:
        if path == ("summary",):
            self.out.append(ContentDelta(chunk))


class Block:
    """Scans one JSON value. `feed` returns the characters after it (None while it
    continues); `out` collects deltas; `failed` when the text was not JSON (what the
    owner does with the text then is its business); `emitted` once anything was
    reported."""

    def __init__(self, syntax: CallSyntax, replay: str, report: Callable[[str], tuple[int, str] | None],
                 finish_tool: str | None, out: list[Delta], records: list[CallRecord]) -> None:  # fmt: skip
        self.syntax = syntax
        self.replay = replay
        self.report = report  # name -> (index, id) for a known tool, else None
        self.finish_tool = finish_tool
        self.out = out
        self.records = records
        self.raw = ""
        self.emitted = False  # anything reported from this block yet
        self.calls: dict[Path, CallRecord] = {}
        self.scanner = JsonScanner(self)
        self.failed = False
        if replay:
            self.feed(replay)

    def feed(self, chars: str) -> str | None:
        """Consume `chars`; once the value is complete (or broken) return the rest."""
        self.raw += chars
        before = self.scanner.pos
        self.scanner.feed(chars)
        used = self.scanner.pos - before
        if self.scanner.pos < len(self.raw):  # stopped early: keep only what it consumed
            self.raw = self.raw[: self.scanner.pos]
        for call in self.calls.values():
            self._flush_args(call)
        if self.scanner.error is not None:
            self.failed = True
            return chars[used:]
        return chars[used:] if self.scanner.done else None

    # -- JsonListener ------------------------------------------------------------------

    def start(self, path: Path, pos: int, char: str) -> None:
        if self.syntax.is_call(path) and char == "{":
            self.calls[path] = CallRecord(start=pos)
        elif path and path[:-1] in self.calls and path[-1] in self.syntax.args_keys:
            call = self.calls[path[:-1]]
            call.args_start, call.args_sent, call.args_container = pos, pos, char in "{["

    def text(self, path: Path, chunk: str) -> None:
        if path == self.syntax.response_path:
            self.emitted = True
            self.out.append(ContentDelta(chunk))
        elif path and path[-1] in self.syntax.name_keys and path[:-1] in self.calls:
            self.calls[path[:-1]].name += chunk

    def end(self, path: Path, pos: int) -> None:
        if path and path[-1] in self.syntax.name_keys and path[:-1] in self.calls:
            self._named(self.calls[path[:-1]])
        elif path and path[:-1] in self.calls and path[-1] in self.syntax.args_keys:
            call = self.calls[path[:-1]]
            call.args_end = pos
            self._flush_args(call)
        elif path in self.calls:
            self._close_call(self.calls.pop(path), pos)

    # -- calls ---------------------------------------------------------------------------

    def _named(self, call: CallRecord) -> None:
        call.named = True
        if self.finish_tool is not None and call.name == self.finish_tool:
            call.finish = True
            call.summary = JsonScanner(SummaryListener(self.out))
            self.emitted = True
        elif call.name in self.syntax.silent_names:  # a call that means "no call"
            call.finish = True
            call.summary = JsonScanner(SummaryListener([]))
            self.emitted = True
        elif (reported := self.report(call.name)) is not None:
            call.index, call.id = reported
            self.emitted = True
            self.out.append(ToolCallStart(call.index, call.id, call.name))
            self.records.append(call)
        self._flush_args(call)

    def _flush_args(self, call: CallRecord) -> None:
        # Only an object (or array) streams; a string or scalar value is passed on whole,
        # at the end of the call (see _close_call).
        if call.args_start is None or not call.args_container or not (call.finish or call.index is not None):
            return
        upto = call.args_end if call.args_end is not None else self.scanner.pos
        if upto <= call.args_sent:
            return
        fragment = self.raw[call.args_sent : upto]
        call.args_sent = upto
        if call.summary is not None:
            call.summary.feed(fragment)
        else:
            call.arguments.append(fragment)
            self.out.append(ToolArgsDelta(call.index or 0, fragment))

    def _close_call(self, call: CallRecord, pos: int) -> None:
        if call.finish:
            return
        if call.index is None:  # no name, or not a tool the request offered
            self.emitted = True
            self.out.append(ContentDelta(self.raw[call.start : pos]))
            return
        if call.args_container:
            return
        # Unconstrained output may give arguments as a JSON-encoded string, or none.
        raw = self.raw[call.args_start : call.args_end] if call.args_start is not None else "{}"
        raw = decoded_args(raw)
        call.arguments.append(raw)
        self.out.append(ToolArgsDelta(call.index, raw))

"""Call blocks written as straight-line programs over the streamed text.

A format describes what follows one of its opening markers as a generator (a *program*)
that yields small matching steps (`Lit`, `Opt`, `Until`, `Text`, `Args`, `JsonCalls`)
and gets each step's result back. `ProgramBlock` feeds the steps whatever text has
arrived, so a program reads as if it had the whole output while it runs incrementally:
results never depend on how the text was split.

A step that cannot match (the model wrote something else) raises `Mismatch` inside the
program, which may catch it (to close a call's arguments, say); uncaught, the block
fails: if it reported nothing, its text so far (marker included) is content. Unconsumed
text then goes back to content scanning. A program that ends returns the rest of the
text the same way. When the output ends inside a block, what was reported stays (a
cut-off call keeps its partial arguments); a block that reported nothing is content.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .block import Block, CallRecord, CallSyntax, SummaryListener, decoded_args
from .deltas import ContentDelta, Delta, ToolArgsDelta, ToolCallStart
from .jsonscan import JsonScanner, Path

__all__ = [
    "Args",
    "BlockIO",
    "Call",
    "JsonCalls",
    "Lit",
    "Mismatch",
    "Op",
    "Opt",
    "Program",
    "ProgramBlock",
    "Text",
    "Until",
]

# Whitespace a step skips before its literal; more than this is not a call.
MAX_WS = 64


class Mismatch(Exception):
    """The text does not continue the block as the format writes it."""


class _Need:
    """A step's result while it needs more text (or, at the end, was cut off)."""


NEED: Any = _Need()
FAIL: Any = object()


class Op(Protocol):
    def step(self, buf: str, final: bool) -> tuple[int, Any]:
        """(characters consumed from `buf`, result | NEED | FAIL). `final`: no more text
        will come."""
        ...


Program = Generator[Op, Any, None]


def _ws(buf: str) -> int:
    """Leading whitespace of `buf`, counted up to MAX_WS + 1."""
    n = 0
    while n < len(buf) and n <= MAX_WS and buf[n].isspace():
        n += 1
    return n


@dataclass
class Lit:
    """`text` (after whitespace when `ws`); result True."""

    text: str
    ws: bool = True

    def step(self, buf: str, final: bool) -> tuple[int, Any]:
        i = _ws(buf) if self.ws else 0
        if i > MAX_WS:
            return 0, FAIL
        rest = buf[i:]
        if rest.startswith(self.text):
            return i + len(self.text), True
        if self.text.startswith(rest):
            return 0, NEED
        return 0, FAIL


@dataclass
class Opt:
    """One of `texts` if the text continues with it (after whitespace when `ws`): result
    that text; else None, consuming nothing."""

    texts: Sequence[str]
    ws: bool = True

    def step(self, buf: str, final: bool) -> tuple[int, Any]:
        i = _ws(buf) if self.ws else 0
        if i > MAX_WS:
            return 0, None
        rest = buf[i:]
        for text in sorted(self.texts, key=len, reverse=True):
            if rest.startswith(text):
                return i + len(text), text
        if i == len(buf) and not final:
            return 0, NEED  # only whitespace so far
        if any(t.startswith(rest) for t in self.texts):
            return 0, NEED  # still possibly one of them (cut off, at the end)
        return 0, None


@dataclass
class Until:
    """The text up to the first of `stops` (within `limit` characters): result (text,
    stop). Longer is a mismatch (names and ids are short; values get a large limit).
    Each character is searched once, however the text arrives."""

    stops: Sequence[str]
    limit: int = 256
    _searched: int = 0

    def step(self, buf: str, final: bool) -> tuple[int, Any]:
        longest = max(map(len, self.stops))
        found = _first(buf, self.stops, max(0, self._searched - longest + 1))
        if found is not None and found[0] <= self.limit:
            i, stop = found
            return i + len(stop), (buf[:i], stop)
        if found is not None or len(buf) > self.limit + longest:
            return 0, FAIL
        self._searched = len(buf)
        return 0, NEED


@dataclass
class Text:
    """Streams the text up to the first of `stops` to `sink` as it arrives (holding back
    only what could start a stop, and with `trim` a whitespace run, dropped before a
    stop). Result: the stop, or None when the output ended first."""

    stops: Sequence[str]
    sink: Callable[[str], None]
    trim: bool = False

    def step(self, buf: str, final: bool) -> tuple[int, Any]:
        found = _first(buf, self.stops)
        if found is not None:
            i, stop = found
            self._send(buf[:i].rstrip() if self.trim else buf[:i])
            return i + len(stop), stop
        if final:
            self._send(buf)
            return len(buf), None
        keep = max((_prefix_tail(buf, s) for s in self.stops), default=0)
        cut = len(buf) - keep
        if self.trim:
            while cut > 0 and buf[cut - 1].isspace():
                cut -= 1
        self._send(buf[:cut])
        return cut, NEED

    def _send(self, text: str) -> None:
        if text:
            self.sink(text)


@dataclass
class Args:
    """A JSON value: the arguments of `call`, passed on as generated when an object (a
    string holding JSON, as unconstrained models sometimes write, is decoded at its
    end). Result: the value's text."""

    call: Call
    _scanner: JsonScanner | None = None
    _text: str = ""
    _start: int | None = None
    _sent: int = 0
    _container: bool = False

    def step(self, buf: str, final: bool) -> tuple[int, Any]:
        if self._scanner is None:
            self._scanner = JsonScanner(self)
        scanner = self._scanner
        before = scanner.pos
        scanner.feed(buf)
        used = scanner.pos - before
        self._text += buf[:used]
        if scanner.error is not None:
            return used, FAIL
        if self._container and self._start is not None:
            self.call.args(self._text[self._sent :])
            self._sent = len(self._text)
        if not scanner.done:
            if final and self._start is not None and not self._container:
                scanner.feed(" ")  # a bare scalar ends with the output
            if not scanner.done:
                return used, NEED
        value = self._text[self._start or 0 :]
        if not self._container:
            self.call.args(decoded_args(value))
        return used, value

    # JsonListener
    def start(self, path: Path, pos: int, char: str) -> None:
        if path == ():
            self._start = self._sent = pos
            self._container = char in "{["

    def end(self, path: Path, pos: int) -> None:
        pass

    def text(self, path: Path, chunk: str) -> None:
        pass


@dataclass
class JsonCalls:
    """A JSON value whose call objects (by `syntax`) are reported as they stream (see
    block.Block); `replay` is the part of the opening marker that belongs to the JSON."""

    syntax: CallSyntax
    replay: str
    io: BlockIO
    block: Block | None = None

    def step(self, buf: str, final: bool) -> tuple[int, Any]:
        if self.block is None:
            self.block = self.io.json_block(self.syntax, self.replay)
        rest = self.block.feed(buf)
        if rest is None:
            return len(buf), NEED
        used = len(buf) - len(rest)
        return used, FAIL if self.block.failed else True


def _first(buf: str, stops: Sequence[str], start: int = 0) -> tuple[int, str] | None:
    """Earliest (then longest) stop in `buf` (from `start`)."""
    best: tuple[int, str] | None = None
    for s in stops:
        i = buf.find(s, start)
        if i >= 0 and (best is None or (i, -len(s)) < (best[0], -len(best[1]))):
            best = (i, s)
    return best


def _prefix_tail(text: str, stop: str) -> int:
    """Length of the longest tail of `text` that is a proper prefix of `stop`."""
    for n in range(min(len(stop) - 1, len(text)), 0, -1):
        if stop.startswith(text[-n:]):
            return n
    return 0


@dataclass
class Call:
    """One call a program found. `known`: a tool of the request or the finish tool;
    otherwise nothing is reported and the program gives the call's text back as content.
    A known call is reported with its first piece of arguments (so a name followed by
    something that is not arguments never becomes a call); the finish tool's summary
    streams as content."""

    io: BlockIO
    name: str
    pending: tuple[int, str] | None = None  # (index, id) to report it with
    record: CallRecord | None = None
    summary: JsonScanner | None = None

    @property
    def known(self) -> bool:
        return self.pending is not None or self.record is not None or self.summary is not None

    def args(self, fragment: str) -> None:
        if not fragment:
            return
        if self.summary is not None:
            self.io.emitted = True
            self.summary.feed(fragment)
            return
        if self.record is None and self.pending is not None:
            (index, call_id), self.pending = self.pending, None
            self.record = CallRecord(start=0, name=self.name, named=True, index=index, id=call_id)
            self.io.records.append(self.record)
            self.io.emitted = True
            self.io.out.append(ToolCallStart(index, call_id, self.name))
        if self.record is not None:
            self.record.arguments.append(fragment)
            self.io.out.append(ToolArgsDelta(self.record.index or 0, fragment))


@dataclass
class BlockIO:
    """What a program reports through: calls, content, the text consumed so far."""

    report: Callable[[str], tuple[int, str] | None]
    finish_tool: str | None
    out: list[Delta]
    records: list[CallRecord]
    make_block: Callable[[CallSyntax, str], Block]
    raw: str = ""
    emitted: bool = False
    blocks: list[Block] = field(default_factory=list)

    def call(self, name: str) -> Call:
        """A call to `name` (reported with its arguments, when it is one of the tools)."""
        if self.finish_tool is not None and name == self.finish_tool:
            return Call(self, name, summary=JsonScanner(SummaryListener(self.out)))
        return Call(self, name, pending=self.report(name))

    def content(self, text: str) -> None:
        if text:
            self.emitted = True
            self.out.append(ContentDelta(text))

    def json_block(self, syntax: CallSyntax, replay: str) -> Block:
        block = self.make_block(syntax, replay)
        self.blocks.append(block)
        return block

    @property
    def reported(self) -> bool:
        return self.emitted or any(b.emitted for b in self.blocks)


class ProgramBlock:
    """Runs one block's program over the text after its opening marker. `feed` returns
    the text after the block once it ended (None while it continues); `finish` is called
    when the output ended and returns the text the block left (to scan as content)."""

    def __init__(self, program: Callable[[BlockIO, str], Program], opener: str, io: BlockIO) -> None:
        self.opener = opener
        self.io = io
        self.buf = ""
        self.failed = False
        self._gen = program(io, opener)
        self._op: Op | None = next(self._gen, None)

    def feed(self, chars: str) -> str | None:
        self.buf += chars
        return self._run(final=False)

    def finish(self) -> str:
        """Run to the end of the output; the text left for content scanning."""
        rest = self._run(final=True)
        if rest is not None:
            return rest
        if not self.io.reported:  # cut off before anything was reported: it is content
            self.io.out.append(ContentDelta(self.opener + self.io.raw + self.buf))
        self.buf = ""
        return ""

    def _run(self, final: bool) -> str | None:
        while self._op is not None:
            n, result = self._op.step(self.buf, final)
            self.io.raw += self.buf[:n]
            self.buf = self.buf[n:]
            if result is NEED:
                return None
            try:
                if result is FAIL:
                    self._op = self._gen.throw(Mismatch())
                else:
                    self._op = self._gen.send(result)
            except StopIteration:
                self._op = None
            except Mismatch:
                self._op = None
                self.failed = True
                if not self.io.reported:
                    self.io.out.append(ContentDelta(self.opener + self.io.raw))
        rest, self.buf = self.buf, ""
        return rest

"""An incremental JSON scanner: fed one character at a time, it reports where values
start and end (by path) and the decoded characters of string values as they arrive.

The stream parser uses it to find a call's name, to slice its arguments exactly as
generated, and to stream string values (a `response`, a finish summary) as content
before the JSON around them is complete.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["JsonListener", "JsonScanner", "Path"]

Path = tuple[str | int, ...]
_WS = " \t\r\n"
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_SCALAR = set("0123456789+-.eEtruefalsn")


class JsonListener(Protocol):
    def start(self, path: Path, pos: int, char: str) -> None:
        """A value at `path` begins with `char` at position `pos`."""

    def end(self, path: Path, pos: int) -> None:
        """The value at `path` ended just before position `pos`."""

    def text(self, path: Path, chunk: str) -> None:
        """Decoded characters of the string value at `path`."""


@dataclass
class _Frame:
    kind: str  # "{" or "["
    path: Path
    state: str  # object: key? key colon value comma; array: value? value comma
    slot: str | int = 0  # key or index of the value being parsed


@dataclass
class JsonScanner:
    """Scans one JSON value (whitespace before it is skipped). `done` once it is
    complete; `error` (a message) at the first character that cannot continue it,
    after which everything is ignored. Positions count characters fed so far."""

    listener: JsonListener
    pos: int = 0
    done: bool = False
    error: str | None = None
    _stack: list[_Frame] = field(default_factory=list)
    _mode: str = "value"  # value | string | key | scalar | after
    _path: Path = ()
    _buf: str = ""  # key text or scalar text so far
    # An escape in progress (e.g. "\\u00e") and a pending high surrogate, so a string
    # split anywhere decodes the same.
    _esc: str = ""
    _surrogate: int = 0

    def feed(self, chars: str) -> None:
        for ch in chars:
            if self.done or self.error is not None:
                return
            self._step(ch)
            if self.error is not None:
                return  # `pos` stays at the offending character
            self.pos += 1

    def _step(self, ch: str) -> None:
        mode = self._mode
        if mode in ("string", "key"):
            self._decode(ch)
        elif mode == "scalar":
            if ch in _SCALAR:
                self._buf += ch
                return
            self._end_scalar()
            if self.error is None:
                self._structural(ch)
        else:
            self._structural(ch)

    def _structural(self, ch: str) -> None:
        if ch in _WS:
            return
        frame = self._stack[-1] if self._stack else None
        if self._mode == "value":
            self._begin_value(ch)
        elif frame is None:
            self._fail(ch)
        elif frame.state in ("key?", "key") and ch == '"':
            self._mode, self._buf = "key", ""
        elif frame.state == "colon" and ch == ":":
            self._mode, self._path = "value", (*frame.path, frame.slot)
        elif frame.state == "comma" and ch == ",":
            if frame.kind == "{":
                frame.state = "key"
            else:
                frame.slot = int(frame.slot) + 1
                self._mode, self._path = "value", (*frame.path, frame.slot)
        elif (frame.state in ("key?", "comma") and ch == "}" and frame.kind == "{") or (
            frame.state in ("value?", "comma") and ch == "]" and frame.kind == "["
        ):
            self._stack.pop()
            self.listener.end(frame.path, self.pos + 1)
            self._after_value()
        elif frame.state == "value?":
            self._mode, self._path = "value", (*frame.path, 0)
            self._begin_value(ch)
        else:
            self._fail(ch)

    def _begin_value(self, ch: str) -> None:
        path = self._path
        if ch in "{[":
            self.listener.start(path, self.pos, ch)
            self._stack.append(_Frame(ch, path, "key?" if ch == "{" else "value?"))
            self._mode = "after"
        elif ch == '"':
            self.listener.start(path, self.pos, ch)
            self._mode, self._buf = "string", ""
        elif ch in _SCALAR:
            self.listener.start(path, self.pos, ch)
            self._mode, self._buf = "scalar", ch
        else:
            self._fail(ch)

    def _after_value(self) -> None:
        if not self._stack:
            self.done = True
        else:
            self._stack[-1].state = "comma"
        self._mode = "after"

    def _end_scalar(self) -> None:
        text = self._buf
        ok = text in ("true", "false", "null")
        if not ok:
            try:
                float(text)
                ok = text[-1].isdigit() and not text.lstrip("-").startswith(("+", "."))
            except ValueError:
                ok = False
        if not ok:
            self.error = f"invalid JSON literal {text!r}"
            return
        self.listener.end(self._path, self.pos)
        self._after_value()

    def _decode(self, ch: str) -> None:
        if self._esc:
            self._esc += ch
            out = self._finish_escape()
            if out is None:
                return
        elif ch == "\\":
            self._esc = "\\"
            return
        elif ch == '"':
            self._close_string()
            return
        elif ord(ch) < 0x20:
            self.error = "control character in JSON string"
            return
        else:
            out = ch
        if self._surrogate and out:
            out = "\ufffd" + out  # a lone high surrogate
            self._surrogate = 0
        self._emit(out)

    def _finish_escape(self) -> str | None:
        esc = self._esc
        if len(esc) == 2 and esc[1] != "u":
            self._esc = ""
            if esc[1] not in _ESCAPES:
                self.error = f"invalid JSON escape {esc!r}"
                return None
            return _ESCAPES[esc[1]]
        if len(esc) < 6:
            return None
        self._esc = ""
        try:
            code = int(esc[2:], 16)
        except ValueError:
            self.error = f"invalid JSON escape {esc!r}"
            return None
        if 0xD800 <= code < 0xDC00:
            pending = "\ufffd" if self._surrogate else ""
            self._surrogate = code
            if pending:
                self._emit(pending)
            return None
        if 0xDC00 <= code < 0xE000 and self._surrogate:
            high, self._surrogate = self._surrogate, 0
            return chr(0x10000 + ((high - 0xD800) << 10) + (code - 0xDC00))
        return "\ufffd" if 0xDC00 <= code < 0xE000 else chr(code)

    def _emit(self, out: str) -> None:
        if self._mode == "key":
            self._buf += out
        else:
            self.listener.text(self._path, out)

    def _close_string(self) -> None:
        if self._surrogate:
            self._surrogate = 0
            self._emit("\ufffd")
        if self._mode == "key":
            frame = self._stack[-1]
            frame.slot, frame.state = self._buf, "colon"
            self._mode = "after"
            return
        self.listener.end(self._path, self.pos + 1)
        self._after_value()

    def _fail(self, ch: str) -> None:
        self.error = f"unexpected {ch!r} at position {self.pos}"

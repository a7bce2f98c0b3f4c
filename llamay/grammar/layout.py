"""The canonical indented layout, byte by byte: what `json.dumps(value, indent=2)` writes.

llguidance's JSON whitespace is one pattern used at every gap, so the "indented" grammar
(shape.py) lets a model put a newline before a comma or indent at any depth. `Indented`
follows the text as it is generated and says whether a piece keeps to the one layout
people expect: after `{`, `[` or `,` a newline and two spaces per level; before the `}`
or `]` that closes a non-empty container a newline and the outer level's indent; `": "`
between key and value; nothing else outside strings. The engine samples only tokens it
accepts (sampling_step.py), writes a token that joins the model's own whitespace to what
it chose in the layout's instead (`respace`), and the shortest endings follow it too
(closing.py). Whitespace after a value can only lead to a closer, so it keeps the layout
only where the grammar lets the container close (constraint.py).

Depth beyond what the grammar's whitespace pattern can indent (`MAX_INDENT` spaces) keeps
that many spaces.
"""

from __future__ import annotations

__all__ = ["Indented", "MAX_INDENT"]

MAX_INDENT = 40  # spaces after a newline that the indented grammar allows (shape.py)
_WS = frozenset(b" \t\n\r")
_OPEN = frozenset(b"{[")
_CLOSE = frozenset(b"}]")
_KEY = -2  # `prev` after an object key: only ":" may follow, with no whitespace


class Indented:
    """Where canonically indented JSON text stands: inside a string (after a backslash),
    the depth, the last byte outside strings that was not whitespace, and the whitespace
    written since. Cheap to copy; `feed` works on the object itself."""

    __slots__ = ("in_string", "escaped", "stack", "prev", "ws", "key")

    def __init__(self) -> None:
        self.in_string = False
        self.escaped = False
        self.stack = b""  # the open containers' first bytes
        self.prev = -1  # nothing yet; _KEY after an object key
        self.ws = b""
        self.key = False  # the open string is an object key

    @property
    def depth(self) -> int:
        return len(self.stack)

    def copy(self) -> Indented:
        other = Indented.__new__(Indented)
        other.in_string, other.escaped, other.stack = self.in_string, self.escaped, self.stack
        other.prev, other.ws, other.key = self.prev, self.ws, self.key
        return other

    def _newline(self, depth: int) -> bytes:
        return b"\n" + b" " * min(2 * max(depth, 0), MAX_INDENT)

    def gap(self, byte: int) -> bytes:
        """The whitespace that must come before `byte` (not whitespace) outside a string."""
        prev = self.prev
        if prev in _OPEN:
            return b"" if byte in _CLOSE else self._newline(self.depth)
        if prev == 0x2C:  # ,
            return self._newline(self.depth)
        if prev == 0x3A:  # :
            return b" "
        if prev != -1 and byte in _CLOSE:
            return self._newline(self.depth - 1)
        return b""

    def _may_start(self, ws: bytes) -> bool:
        """Whether `ws` can begin the gap before whatever comes next."""
        prev = self.prev
        if prev in (-1, _KEY):
            return False
        if prev in _OPEN or prev == 0x2C:
            wanted = self._newline(self.depth)
        elif prev == 0x3A:
            wanted = b" "
        else:  # after a value: only before the closer
            wanted = self._newline(self.depth - 1) if self.depth > 0 else b""
        return wanted.startswith(ws)

    def feed(self, data: bytes) -> bool:
        """Advance past `data`; False if some byte of it left the layout (the state still
        follows the text, so a text that left it once is judged on from there)."""
        ok = True
        for b in data:
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif b == 0x5C:
                    self.escaped = True
                elif b == 0x22:
                    self.in_string = False
                    self.prev = _KEY if self.key else b
                continue
            if b in _WS:
                self.ws += bytes((b,))
                ok = ok and self._may_start(self.ws)
                continue
            ok = ok and self.ws == self.gap(b)
            self.ws = b""
            if b == 0x22:
                self.in_string = True
                self.key = self.stack[-1:] == b"{" and self.prev in (0x7B, 0x2C)
            elif b in _OPEN:
                self.stack += bytes((b,))
            elif b in _CLOSE:
                self.stack = self.stack[:-1]
            self.prev = b
        return ok

    def pending_close(self) -> bytes | None:
        """When whitespace after a value has been written (it can only be the gap before
        the closer), the rest of that gap and the closer's byte; else None."""
        if self.in_string or not self.ws or self.prev in (-1, _KEY, 0x2C, 0x3A) or self.prev in _OPEN:
            return None
        if not self.stack:
            return None
        closer = b"}" if self.stack[-1:] == b"{" else b"]"
        return self._newline(self.depth - 1)[len(self.ws) :] + closer

    def respace(self, data: bytes) -> bytes | None:
        """`data` with the whitespace outside strings rewritten to the layout: each gap the
        one it must be, a trailing gap after `,`, `:`, `{` or `[` written whole (one after
        a value dropped: it could only lead to a closer). None when that leaves nothing or
        the gap written before `data` does not start the one needed. Nothing is advanced."""
        scan = self.copy()
        out = bytearray()
        for b in data:
            if scan.in_string or b not in _WS:
                if not scan.in_string:
                    gap = scan.gap(b)
                    if not gap.startswith(scan.ws):
                        return None
                    out += gap[len(scan.ws) :]
                    scan.ws = b""
                out.append(b)
                scan.feed(bytes((b,)))
        if not scan.in_string and data[-1:] and data[-1] in _WS and scan.prev in (0x2C, 0x3A, *_OPEN):
            want = b" " if scan.prev == 0x3A else scan._newline(scan.depth)
            if want.startswith(scan.ws):
                out += want[len(scan.ws) :]
        return bytes(out) or None

    def accepts(self, data: bytes) -> bool:
        """Whether `data` keeps to the layout from here (nothing is advanced)."""
        return self.copy().feed(data)

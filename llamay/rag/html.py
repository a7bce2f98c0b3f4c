"""HTML -> text, each word mapped to its bytes in the source file.

Tags, comments, ``<script>`` and ``<style>`` are dropped; character references are decoded;
runs of whitespace become one space; block elements (``<p>``, ``<div>``, ``<h1>``, ``<li>``,
``<tr>``, ...) end a paragraph (a blank line in the text), ``<br>`` and table cells a line.
Every character of a word maps to the byte range of that word as written in the source (so
``&amp;`` maps to its five bytes); the spaces and line breaks put between words map to the
empty range at the end of the word before.  A passage's [start, end) is therefore the region
of the source from its first word to its last, tags in between included.
"""

from __future__ import annotations

import html
import re

import numpy as np

from .extracted import Extracted, decode_utf8, utf8_offsets

__all__ = ["BLOCK_TAGS", "html_text"]

_MARKUP = re.compile(
    r"<!--.*?(?:-->|\Z)"  # a comment; an unclosed one runs to the end
    r"|<!\[CDATA\[.*?(?:\]\]>|\Z)"
    r"|<[!?][^>]*>?"  # doctype, processing instruction
    r"|<(/?)([A-Za-z][A-Za-z0-9:._-]*)(?:[^>\"']|\"[^\"]*\"|'[^']*')*>?",
    re.S,
)
_WORD = re.compile(r"\S+")
_RAW_TEXT = frozenset({"script", "style", "template"})

#: Elements that start and end a paragraph.
# fmt: off
BLOCK_TAGS = frozenset({
    "address", "article", "aside", "blockquote", "body", "caption", "dd", "details", "dialog",
    "div", "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3",
    "h4", "h5", "h6", "head", "header", "hgroup", "hr", "html", "li", "main", "nav", "ol",
    "option", "p", "pre", "section", "summary", "table", "tbody", "tfoot", "thead", "title",
    "tr", "ul",
})
# fmt: on
_LINE_TAGS = frozenset({"br", "td", "th"})


class _Text:
    """Extracted text built from pieces, each piece's characters sharing one byte range."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.last_end = 0
        self.pending = ""  # the break owed before the next word: "", " ", "\n" or "\n\n"

    def brk(self, kind: str) -> None:
        """Owe a break before the next word; the strongest owed break wins."""
        if len(kind) > len(self.pending):
            self.pending = kind

    def word(self, text: str, start: int, end: int) -> None:
        if self.pending and self.pieces:
            self._piece(self.pending, self.last_end, self.last_end)
        self.pending = ""
        self._piece(text, start, end)
        self.last_end = end

    def _piece(self, text: str, start: int, end: int) -> None:
        self.pieces.append(text)
        self.starts.append(start)
        self.ends.append(end)

    def done(self) -> Extracted:
        lengths = np.array([len(p) for p in self.pieces], dtype=np.int64)
        starts = np.repeat(np.array(self.starts, dtype=np.int64), lengths)
        ends = np.repeat(np.array(self.ends, dtype=np.int64), lengths)
        return Extracted("".join(self.pieces), starts, ends)


def _data(out: _Text, src: str, a: int, b: int, byte_starts: np.ndarray, byte_ends: np.ndarray) -> None:
    """The text between two tags, src[a:b], word by word."""
    pos = a
    for m in _WORD.finditer(src, a, b):
        if m.start() > pos:
            out.brk(" ")
        pos = m.end()
        text = " ".join(html.unescape(m.group()).split())
        if not text:  # a reference to whitespace, such as &nbsp;
            out.brk(" ")
            continue
        out.word(text, int(byte_starts[m.start()]), int(byte_ends[m.end() - 1]))
    if pos < b:
        out.brk(" ")


def html_text(raw: bytes) -> Extracted:
    """The text of an HTML page (UTF-8) with each character's source byte range; see the module
    docstring.  NotExtractable if the file is not UTF-8."""
    src, base = decode_utf8(raw)
    byte_starts, byte_ends = utf8_offsets(src, base)
    out = _Text()
    pos, n = 0, len(src)
    while pos < n:
        m = _MARKUP.search(src, pos)
        _data(out, src, pos, m.start() if m else n, byte_starts, byte_ends)
        if m is None:
            break
        pos = m.end()
        name = (m.group(2) or "").lower()
        closing = bool(m.group(1))
        if name in _RAW_TEXT and not closing and not m.group().endswith("/>"):
            close = re.compile(rf"</{name}\s*>", re.I).search(src, pos)
            pos = close.end() if close else n
        if name in BLOCK_TAGS:
            out.brk("\n\n")
        elif name in _LINE_TAGS:
            out.brk("\n")
    return out.done()

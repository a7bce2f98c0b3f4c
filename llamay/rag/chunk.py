"""Splitting a document's text into passages on paragraph boundaries.

Paragraphs are separated by blank lines.  Small consecutive paragraphs are merged until a
passage holds at least `min_words` words (never past `max_words`); a paragraph longer than
`max_words` is cut on sentence boundaries into balanced pieces (a sentence longer than that, on
word boundaries).  A passage's text is ``text[a:b]`` of the document for a span that starts and
ends on a non-space character, so passages of a plain-text file are exact slices of the file.

Words are runs of non-space characters; a CJK ideograph or kana counts as one word by itself,
and a very long run (a URL, base64) counts one word per `LONG_WORD` characters.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .extracted import Extracted

__all__ = ["LONG_WORD", "MAX_WORDS", "MIN_WORDS", "Passage", "chunk", "paragraph_spans", "word_count"]

MIN_WORDS = 100
MAX_WORDS = 250
#: Characters of a run without spaces that count as one word.
LONG_WORD = 32

_CJK = "\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f"
_TOKEN = re.compile(rf"[{_CJK}]|[^\s{_CJK}]+")
_PARA_BREAK = re.compile(r"\n[^\S\n]*\n")
_SENTENCE_END = re.compile(
    r"[.!?\u2026]+[\"'\u201d\u2019)\]]*(?=\s)|[\u3002\uff01\uff1f]+[\u300d\u300f\u201d\u2019\uff09)]*"
)


@dataclass(frozen=True)
class Passage:
    """`text` and the byte range [start, end) of the source it came from (see `Extracted`)."""

    text: str
    start: int
    end: int


@dataclass(frozen=True)
class _Span:
    a: int
    b: int
    words: int


def _size(token: str) -> int:
    return max(1, math.ceil(len(token) / LONG_WORD))


def word_count(text: str, a: int = 0, b: int | None = None) -> int:
    """Words in ``text[a:b]`` (see the module docstring)."""
    return sum(_size(m.group()) for m in _TOKEN.finditer(text, a, len(text) if b is None else b))


def _strip(text: str, a: int, b: int) -> tuple[int, int]:
    while a < b and text[a].isspace():
        a += 1
    while b > a and text[b - 1].isspace():
        b -= 1
    return a, b


def paragraph_spans(text: str) -> list[tuple[int, int]]:
    """(a, b) of each non-empty paragraph of `text`, stripped of surrounding whitespace."""
    spans: list[tuple[int, int]] = []
    pos = 0
    for m in [*_PARA_BREAK.finditer(text), None]:
        a, b = _strip(text, pos, m.start() if m else len(text))
        if b > a:
            spans.append((a, b))
        if m is not None:
            pos = m.end()
    return spans


def _sentences(text: str, a: int, b: int) -> list[_Span]:
    out: list[_Span] = []
    pos = a
    for m in [*_SENTENCE_END.finditer(text, a, b), None]:
        s, e = _strip(text, pos, m.end() if m else b)
        if e > s:
            out.append(_Span(s, e, word_count(text, s, e)))
        if m is not None:
            pos = m.end()
    return out


def _windows(text: str, span: _Span, max_words: int) -> list[_Span]:
    """`span` cut on word boundaries into pieces of at most `max_words` words (a single run
    longer than that, into pieces of ``max_words * LONG_WORD`` characters)."""
    out: list[_Span] = []
    start, words, end = -1, 0, span.a
    for m in _TOKEN.finditer(text, span.a, span.b):
        size = _size(m.group())
        if size > max_words:  # one enormous run: hard cuts
            if start >= 0:
                out.append(_Span(start, end, words))
            step = max_words * LONG_WORD
            out += [_Span(i, min(i + step, m.end()), max_words) for i in range(m.start(), m.end(), step)]
            start, words = -1, 0
            continue
        if start >= 0 and words + size > max_words:
            out.append(_Span(start, end, words))
            start, words = -1, 0
        if start < 0:
            start = m.start()
        words += size
        end = m.end()
    if start >= 0:
        out.append(_Span(start, end, words))
    return out


def _split_long(text: str, span: _Span, max_words: int) -> list[_Span]:
    """A paragraph over `max_words`: sentences packed into about equal pieces."""
    units: list[_Span] = []
    for s in _sentences(text, span.a, span.b):
        units += [s] if s.words <= max_words else _windows(text, s, max_words)
    target = span.words / math.ceil(span.words / max_words)
    out: list[_Span] = []
    for u in units:
        last = out[-1] if out else None
        if last is not None and last.words < target and last.words + u.words <= max_words:
            out[-1] = _Span(last.a, u.b, last.words + u.words)
        else:
            out.append(u)
    return out


def chunk(doc: Extracted, min_words: int = MIN_WORDS, max_words: int = MAX_WORDS) -> list[Passage]:
    """The passages of `doc`, in order (see the module docstring); none for a blank text."""
    text = doc.text
    units: list[_Span] = []
    for a, b in paragraph_spans(text):
        para = _Span(a, b, word_count(text, a, b))
        units += [para] if para.words <= max_words else _split_long(text, para, max_words)
    merged: list[_Span] = []
    for u in units:
        last = merged[-1] if merged else None
        if last is not None and last.words < min_words and last.words + u.words <= max_words:
            merged[-1] = _Span(last.a, u.b, last.words + u.words)
        else:
            merged.append(u)
    if len(merged) > 1 and merged[-1].words < min_words and merged[-2].words + merged[-1].words <= max_words:
        tail = merged.pop()
        merged[-1] = _Span(merged[-1].a, tail.b, merged[-1].words + tail.words)
    return [Passage(text[s.a : s.b], *doc.span(s.a, s.b)) for s in merged]

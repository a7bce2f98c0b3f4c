"""Document text with a map back to the bytes of the source file, and the UTF-8 arithmetic
every extractor shares.

`Extracted.text` is what gets chunked, embedded and returned; ``starts[i]`` / ``ends[i]`` give
the byte range of the source file that character ``i`` came from.  For plain text and Markdown
the text *is* the file (UTF-8, without a leading byte-order mark), so every character maps to its
own bytes and ``source[start:end].decode() == text[a:b]`` for any slice.  For HTML and PDF a
character maps to the region it was extracted from (a word of the HTML, a page's content stream
in the PDF), see `llamay.rag.html` and `llamay.rag.pdf`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Extracted", "NotExtractable", "decode_utf8", "utf8_offsets"]

_BOM = b"\xef\xbb\xbf"


class NotExtractable(ValueError):
    """A supported file whose text cannot be read (not UTF-8, a broken PDF, no PDF parser)."""


@dataclass(frozen=True)
class Extracted:
    """`text` and, per character, the source byte range it came from (int64 arrays of
    ``len(text)``)."""

    text: str
    starts: np.ndarray
    ends: np.ndarray

    def span(self, a: int, b: int) -> tuple[int, int]:
        """The source byte range [start, end) that the characters ``text[a:b]`` (b > a) came
        from: the smallest range covering every character's own range."""
        return int(self.starts[a:b].min()), int(self.ends[a:b].max())


def utf8_offsets(text: str, base: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends): the UTF-8 byte range of each character of `text`, counted from `base`."""
    if not text:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty.copy()
    cps = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    lens = 1 + (cps >= 0x80).astype(np.int64) + (cps >= 0x800) + (cps >= 0x10000)
    ends = np.cumsum(lens) + base
    return ends - lens, ends


def decode_utf8(raw: bytes) -> tuple[str, int]:
    """(text, byte offset of its first character): `raw` as UTF-8 without a leading BOM.
    NotExtractable if it is not UTF-8."""
    base = len(_BOM) if raw.startswith(_BOM) else 0
    try:
        return raw[base:].decode("utf-8"), base
    except UnicodeDecodeError as exc:
        raise NotExtractable(f"not UTF-8 text (byte {exc.start + base})") from None

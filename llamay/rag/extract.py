"""Document text with a map back to the bytes of the source file.

`Extracted.text` is what gets chunked, embedded and returned; ``starts[i]`` / ``ends[i]`` give
the byte range of the source file that character ``i`` came from.  For plain text and Markdown
the text *is* the file (UTF-8, without a leading byte-order mark), so every character maps to its
own bytes and ``source[start:end].decode() == text[a:b]`` for any slice.  For HTML and PDF a
character maps to the region it was extracted from (a word of the HTML, a page's content stream
in the PDF), see `llamay.rag.html` and `llamay.rag.pdf`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = [
    "Extracted",
    "KINDS",
    "NotExtractable",
    "extract_file",
    "kind_of",
    "plain_text",
    "utf8_offsets",
]

#: File suffix -> kind of document.  Other files are not indexed.
KINDS: dict[str, str] = {
    ".txt": "text",
    ".text": "text",
    ".rst": "text",
    ".md": "markdown",
    ".markdown": "markdown",
    ".html": "html",
    ".htm": "html",
    ".xhtml": "html",
    ".pdf": "pdf",
}

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


def kind_of(path: Path) -> str | None:
    """The document kind for a file name ("text", "markdown", "html", "pdf"), None if the file
    is not indexed."""
    return KINDS.get(path.suffix.lower())


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


def plain_text(raw: bytes) -> Extracted:
    """A UTF-8 text or Markdown file: the text is the file, each character mapped to its bytes."""
    text, base = decode_utf8(raw)
    starts, ends = utf8_offsets(text, base)
    return Extracted(text, starts, ends)


def extract_file(path: Path, kind: str, raw: bytes | None = None) -> Extracted:
    """The text of the file at `path` of `kind` (`raw` = its bytes, if already read).  Raises
    NotExtractable for a file whose text cannot be read, OSError when it cannot be opened."""
    data = path.read_bytes() if raw is None else raw
    if kind in ("text", "markdown"):
        return plain_text(data)
    if kind == "html":
        from .html import html_text

        return html_text(data)
    if kind == "pdf":
        from .pdf import pdf_text

        return pdf_text(data)
    raise NotExtractable(f"unsupported kind of document: {kind}")

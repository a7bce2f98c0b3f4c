"""Which files are documents, and their text: a file of each kind -> `Extracted` (see
`llamay.rag.extracted` for how its characters map back to the file's bytes). Plain text and
Markdown here, HTML in `llamay.rag.html`, PDF in `llamay.rag.pdf`.
"""

from __future__ import annotations

from pathlib import Path

from .extracted import Extracted, NotExtractable, decode_utf8, utf8_offsets
from .html import html_text
from .pdf import pdf_text

__all__ = ["KINDS", "extract_file", "kind_of", "plain_text"]

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


def kind_of(path: Path) -> str | None:
    """The document kind for a file name ("text", "markdown", "html", "pdf"), None if the file
    is not indexed."""
    return KINDS.get(path.suffix.lower())


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
        return html_text(data)
    if kind == "pdf":
        return pdf_text(data)
    raise NotExtractable(f"unsupported kind of document: {kind}")

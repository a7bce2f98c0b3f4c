"""PDF -> text with `pypdf`, each page's text mapped to the bytes of that page's content.

A PDF's text is drawn by compressed content streams, so a character cannot be traced to bytes
of its own.  Every character of a page maps instead to the byte range of the page's content
stream object(s) in the file (``N 0 obj ... endobj``; several streams: from the first to the
last), or of the page object when the streams cannot be located, or of the whole file when
neither can.  Pages are separate paragraphs; a passage's [start, end) is the region covering
the content of the pages its text came from.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from .extracted import Extracted, NotExtractable

__all__ = ["pdf_text"]


def _object_region(reader: Any, ref: Any, raw: bytes) -> tuple[int, int] | None:
    """The bytes of the indirect object `ref` in the file: ``N G obj`` to ``endobj``."""
    idnum, generation = getattr(ref, "idnum", None), getattr(ref, "generation", None)
    if idnum is None:
        return None
    offset = reader.xref.get(generation, {}).get(idnum)
    if not isinstance(offset, int) or not 0 <= offset < len(raw):
        return None
    stop = raw.find(b"endobj", offset)
    return offset, (stop + len(b"endobj") if stop >= 0 else len(raw))


def _page_region(reader: Any, page: Any, raw: bytes) -> tuple[int, int]:
    contents = page.raw_get("/Contents") if "/Contents" in page else None
    refs = list(contents) if isinstance(contents, list) else [contents]
    regions = [r for r in (_object_region(reader, ref, raw) for ref in refs) if r is not None]
    if not regions:
        own = _object_region(reader, page.indirect_reference, raw)
        regions = [own] if own is not None else [(0, len(raw))]
    return min(r[0] for r in regions), max(r[1] for r in regions)


def pdf_text(raw: bytes) -> Extracted:
    """The text of a PDF, page by page (pages separated by a blank line), each character mapped
    to its page's content region (see the module docstring).  NotExtractable when pypdf is not
    installed or cannot read the file (broken, encrypted)."""
    try:
        from pypdf import PdfReader
    except ImportError:
        raise NotExtractable("reading PDF files needs the pypdf package (pip install pypdf)") from None
    pieces: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    try:
        reader = PdfReader(io.BytesIO(raw))
        if reader.is_encrypted and not reader.decrypt(""):
            raise NotExtractable("the PDF is encrypted")
        for page in reader.pages:
            text = "\n".join(line.rstrip() for line in page.extract_text().splitlines()).strip()
            if not text:
                continue
            start, end = _page_region(reader, page, raw)
            if pieces:
                pieces.append("\n\n")
                starts.append(ends[-1])
                ends.append(ends[-1])
            pieces.append(text)
            starts.append(start)
            ends.append(end)
    except NotExtractable:
        raise
    except Exception as exc:  # pypdf raises many kinds on broken files
        raise NotExtractable(f"cannot read the PDF: {exc}") from None
    lengths = np.array([len(p) for p in pieces], dtype=np.int64)
    return Extracted(
        "".join(pieces),
        np.repeat(np.array(starts, dtype=np.int64), lengths),
        np.repeat(np.array(ends, dtype=np.int64), lengths),
    )

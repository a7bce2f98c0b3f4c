"""Extraction: HTML text with each word mapped to its bytes in the page, PDF text mapped to the
page's content stream, and the file kinds that are indexed."""

from __future__ import annotations

import html
from pathlib import Path

import pytest

from llamay.rag.chunk import chunk
from llamay.rag.extract import extract_file, kind_of
from llamay.rag.extracted import NotExtractable
from llamay.rag.html import html_text
from llamay.rag.pdf import pdf_text

PAGE = """<!DOCTYPE html>
<html><head><title>Caf\u00e9 &amp; r\u00e9sum\u00e9</title>
<style>p { color: red }</style><script>if (a < b) { document.write("<p>no</p>") }</script>
</head><body>
<!-- a comment with <p>markup</p> -->
<h1>Prix &eacute;lev\u00e9s</h1>
<p>Un <b>gras</b>mot et <i>italique</i> ici &#8212; fin.</p>
<div>Deux&nbsp;mots<br>ligne 日本語</div>
<p>1 &lt; 2</p>
</body></html>
"""


def test_html_text_drops_markup_and_keeps_paragraphs() -> None:
    got = html_text(PAGE.encode())
    assert got.text == (
        "Caf\u00e9 & r\u00e9sum\u00e9\n\nPrix \u00e9lev\u00e9s\n\n"
        "Un grasmot et italique ici \u2014 fin.\n\nDeux mots\nligne 日本語\n\n1 < 2"
    )


def test_every_html_word_maps_to_its_source_bytes() -> None:
    raw = PAGE.encode()
    got = html_text(raw)
    assert len(got.starts) == len(got.ends) == len(got.text)
    ranges = list(zip(got.starts.tolist(), got.ends.tolist(), strict=True))
    a = 0
    while a < len(ranges):  # each run of characters sharing one source range
        b = a
        while b < len(ranges) and ranges[b] == ranges[a]:
            b += 1
        start, end = ranges[a]
        if start == end:  # a break put between words
            assert got.text[a:b].isspace()
        else:
            # The word as written in the page: unescaped, it reads as the extracted word.
            source = raw[start:end].decode()
            assert "<" not in source
            assert " ".join(html.unescape(source).split()) == got.text[a:b]
        a = b


def test_html_passage_region_runs_from_first_to_last_word() -> None:
    raw = PAGE.encode()
    (passage,) = chunk(html_text(raw))
    assert raw[passage.start :].startswith("Caf\u00e9 &amp;".encode())
    assert raw[: passage.end].endswith(b"1 &lt; 2")


def test_html_edge_cases() -> None:
    assert html_text(b"").text == ""
    assert html_text(b"<p>open comment <!-- never closed <p>x").text == "open comment"
    assert html_text(b"a<script>never closed").text == "a"
    assert html_text(b"<p a='>'>quoted</p>").text == "quoted"
    with pytest.raises(NotExtractable):
        html_text("<p>caf\u00e9</p>".encode("latin-1"))


def write_pdf(pages: list[list[str]]) -> bytes:
    """A minimal PDF: one page per item, each line drawn with Helvetica."""
    objs: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    n = len(pages)
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(n))
    objs.append(f"<< /Type /Pages /Kids [{kids}] /Count {n} >>".encode())
    for i, lines in enumerate(pages):
        ops = ["BT", "/F1 12 Tf", "72 720 Td", "14 TL"]
        ops += [f"({line}) Tj T*" for line in lines]
        stream = "\n".join([*ops, "ET"]).encode("latin-1")
        objs.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 "
            f"{3 + 2 * n} 0 R >> >> /Contents {4 + 2 * i} 0 R >>".encode()
        )
        objs.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    objs.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objs, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1)
    out += b"".join(b"%010d 00000 n \n" % off for off in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objs) + 1, xref)
    return bytes(out)


def test_pdf_pages_map_to_their_content_streams() -> None:
    raw = write_pdf([["Quarterly revenue grew.", "Costs fell."], ["Second page text."]])
    got = pdf_text(raw)
    assert got.text == "Quarterly revenue grew.\nCosts fell.\n\nSecond page text."
    first = got.span(0, 5)
    second = got.span(len(got.text) - 4, len(got.text))
    assert raw[first[0] : first[1]].startswith(b"4 0 obj") and raw[first[0] : first[1]].endswith(b"endobj")
    assert b"(Quarterly revenue grew.) Tj" in raw[first[0] : first[1]]
    assert b"(Second page text.) Tj" in raw[second[0] : second[1]]
    (passage,) = chunk(got)
    assert (passage.start, passage.end) == (first[0], second[1])


def test_broken_pdf_is_not_extractable() -> None:
    with pytest.raises(NotExtractable):
        pdf_text(b"%PDF-1.4\nthis is not a pdf")


def test_kinds_and_dispatch(tmp_path: Path) -> None:
    assert [kind_of(Path(n)) for n in ("a.TXT", "b.md", "c.HTML", "d.pdf", "e.docx", "f")] == [
        "text",
        "markdown",
        "html",
        "pdf",
        None,
        None,
    ]
    (tmp_path / "a.md").write_text("# hi\n\nthere")
    assert extract_file(tmp_path / "a.md", "markdown").text == "# hi\n\nthere"
    with pytest.raises(NotExtractable):
        extract_file(tmp_path / "a.md", "docx")

"""A small, safe Markdown renderer for the integration guide.

Contract: every character of the input reaches the output HTML-escaped; the only markup is
what this module writes itself. Supported: ATX headings (with ids), paragraphs, bullet and
numbered lists (one level), fenced code blocks, inline code, ``**bold**``, links whose
target is http(s), a relative path or a #fragment (any other scheme is shown as text), and
pipe tables. No raw HTML passes through, so the page needs no inline script or style.
"""

from __future__ import annotations

import html
import re

__all__ = ["render", "render_page"]

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_BULLET = re.compile(r"^\s*[-*]\s+(.*)$")
_NUMBER = re.compile(r"^\s*\d+[.)]\s+(.*)$")
_FENCE = re.compile(r"^\s*```\s*([\w+-]*)\s*$")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")
_INLINE = re.compile(r"`([^`]+)`|\*\*(.+?)\*\*|\[([^\]]+)\]\(([^)\s]+)\)")
_SAFE_TARGET = re.compile(r"^(https?://|/|\.{0,2}/|#)[^\s\"'<>`]*$")


def _inline(text: str) -> str:
    """One line of text with inline code, bold and links; everything else escaped."""
    out: list[str] = []
    pos = 0
    for m in _INLINE.finditer(text):
        out.append(html.escape(text[pos : m.start()]))
        code, bold, label, target = m.groups()
        if code is not None:
            out.append(f"<code>{html.escape(code)}</code>")
        elif bold is not None:
            out.append(f"<strong>{_inline(bold)}</strong>")
        elif _SAFE_TARGET.match(target):
            out.append(f'<a href="{html.escape(target, quote=True)}">{_inline(label)}</a>')
        else:
            out.append(html.escape(m.group(0)))
        pos = m.end()
    out.append(html.escape(text[pos:]))
    return "".join(out)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"


def _cells(row: str) -> list[str]:
    row = row.strip()
    row = row[1:] if row.startswith("|") else row
    row = row[:-1] if row.endswith("|") else row
    return [c.strip() for c in row.split("|")]


def _table(rows: list[str]) -> str:
    head, body = _cells(rows[0]), [_cells(r) for r in rows[2:]]
    out = ["<table><thead><tr>", *(f"<th>{_inline(c)}</th>" for c in head), "</tr></thead><tbody>"]
    for cells in body:
        out += ["<tr>", *(f"<td>{_inline(c)}</td>" for c in cells), "</tr>"]
    out.append("</tbody></table>")
    return "".join(out)


def render(text: str) -> str:
    """The HTML body for Markdown `text` (a fragment, no <html> wrapper)."""
    lines = text.replace("\r\n", "\n").split("\n")
    out: list[str] = []
    para: list[str] = []
    i = 0

    def flush() -> None:
        if para:
            out.append(f"<p>{_inline(' '.join(para))}</p>")
            para.clear()

    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence:
            flush()
            lang = fence.group(1)
            j = i + 1
            while j < len(lines) and not _FENCE.match(lines[j]):
                j += 1
            cls = f' class="lang-{html.escape(lang, quote=True)}"' if lang else ""
            out.append(f"<pre><code{cls}>{html.escape(chr(10).join(lines[i + 1 : j]))}</code></pre>")
            i = j + 1
            continue
        heading = _HEADING.match(line)
        if heading:
            flush()
            level, title = len(heading.group(1)), heading.group(2)
            out.append(f'<h{level} id="{_slug(title)}">{_inline(title)}</h{level}>')
        elif "|" in line and i + 1 < len(lines) and _TABLE_RULE.match(lines[i + 1]):
            flush()
            j = i + 2
            while j < len(lines) and "|" in lines[j] and lines[j].strip():
                j += 1
            out.append(_table(lines[i:j]))
            i = j
            continue
        elif _BULLET.match(line) or _NUMBER.match(line):
            flush()
            numbered = bool(_NUMBER.match(line)) and not _BULLET.match(line)
            pattern = _NUMBER if numbered else _BULLET
            items: list[str] = []
            while i < len(lines) and lines[i].strip():
                m = pattern.match(lines[i])
                if m:
                    items.append(m.group(1))
                elif items:  # a continuation line of the item before
                    items[-1] += " " + lines[i].strip()
                i += 1
            tag = "ol" if numbered else "ul"
            out.append(f"<{tag}>" + "".join(f"<li>{_inline(it)}</li>" for it in items) + f"</{tag}>")
            continue
        elif not line.strip():
            flush()
        else:
            para.append(line.strip())
        i += 1
    flush()
    return "\n".join(out)


def render_page(text: str, title: str) -> str:
    """A whole HTML page around `render(text)`, styled by the console's own stylesheet."""
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title>"
        '<link rel="stylesheet" href="/web/style.css"></head>'
        '<body class="doc"><nav class="doc-nav"><a href="/">llamay console</a>'
        '<a href="/api/docs">this guide as Markdown</a></nav>'
        f'<main class="guide">{render(text)}</main></body></html>\n'
    )

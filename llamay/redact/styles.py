"""Replacement styles: how a finding is written in the redacted text.

- "type": `[EMAIL]`, `[CARD_NUMBER]`, ...
- "mask": every character becomes `*` except whitespace and the punctuation that lays an
  identifier out (`- . / : @ ( ) + ,`), so the length and layout stay.
- "pseudonym": `[EMAIL_1]`, `[EMAIL_2]`, ... numbered per type in order of first
  appearance; the same identifier (equal canonical keys, so "4111 1111 1111 1111" and
  "4111-1111-1111-1111" alike) gets the same pseudonym within one call. Labelled tokens
  rather than realistic fakes: they cannot collide with a real person's identifier and a
  reader (or a model) cannot mistake them for one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, get_args

from .resolve import Candidate

__all__ = ["STYLES", "Style", "render"]

Style = Literal["type", "mask", "pseudonym"]
STYLES: tuple[str, ...] = get_args(Style)
_KEEP = frozenset("-./:@()+,")


def _mask(value: str) -> str:
    return "".join(ch if ch in _KEEP or ch.isspace() else "*" for ch in value)


def render(text: str, winners: Sequence[Candidate], style: Style) -> str:
    """`text` with each winner (sorted by start, disjoint) replaced in `style`."""
    names: dict[tuple[str, str], str] = {}
    counts: dict[str, int] = {}
    parts: list[str] = []
    pos = 0
    for c in winners:
        parts.append(text[pos : c.start])
        if style == "type":
            parts.append(f"[{c.type}]")
        elif style == "mask":
            parts.append(_mask(text[c.start : c.end]))
        else:
            name = names.get((c.type, c.key))
            if name is None:
                counts[c.type] = counts.get(c.type, 0) + 1
                name = names[(c.type, c.key)] = f"[{c.type}_{counts[c.type]}]"
            parts.append(name)
        pos = c.end
    parts.append(text[pos:])
    return "".join(parts)

"""What the stream parser reports, in generation order."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ContentDelta", "Delta", "ToolArgsDelta", "ToolCallStart", "coalesce"]


@dataclass(frozen=True)
class ContentDelta:
    """Plain assistant text."""

    text: str


@dataclass(frozen=True)
class ToolCallStart:
    """Call `index` (0, 1, ... in the order calls start) to `name`; `id` is
    "call_" + 24 hex digits."""

    index: int
    id: str
    name: str


@dataclass(frozen=True)
class ToolArgsDelta:
    """The next piece of call `index`'s arguments JSON text."""

    index: int
    fragment: str


Delta = ContentDelta | ToolCallStart | ToolArgsDelta


def coalesce(deltas: list[Delta]) -> list[Delta]:
    """Merge neighbouring content pieces, and neighbouring argument pieces of one call;
    drop empty ones."""
    out: list[Delta] = []
    for d in deltas:
        last = out[-1] if out else None
        if isinstance(d, ContentDelta):
            if not d.text:
                continue
            if isinstance(last, ContentDelta):
                out[-1] = ContentDelta(last.text + d.text)
                continue
        elif isinstance(d, ToolArgsDelta):
            if not d.fragment:
                continue
            if isinstance(last, ToolArgsDelta) and last.index == d.index:
                out[-1] = ToolArgsDelta(d.index, last.fragment + d.fragment)
                continue
        out.append(d)
    return out

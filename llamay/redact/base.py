"""The shapes every detector shares: what a detector yields and what `redact` reports.

A detector is a name plus a function from text to spans. A span carries a canonical key
(digits only for a card, E.164 for a phone, ...) so that two spellings of the same
identifier get the same pseudonym; the key never leaves the process in a result.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

__all__ = ["Span", "Detector", "Finding"]


class Span(NamedTuple):
    """One candidate from one detector: `text[start:end]` is the identifier (str indices),
    `key` its canonical form (equal keys mean the same identifier)."""

    start: int
    end: int
    key: str


@dataclass(frozen=True, slots=True)
class Detector:
    """A named rule-based detector. `find(text)` yields every valid identifier it sees, in
    any order; spans may overlap each other (the resolver picks among them)."""

    name: str
    find: Callable[[str], Iterable[Span]]
    description: str = ""


@dataclass(frozen=True, slots=True)
class Finding:
    """One redacted identifier: its type, its character offsets in the input text
    (Python str indices, end exclusive) and which engine found it."""

    type: str
    start: int
    end: int
    source: str = "rules"

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "start": self.start, "end": self.end, "source": self.source}

"""PHONE: telephone numbers, validated with Google's libphonenumber metadata (the
`phonenumbers` package) rather than by shape.

Numbers written with a `+` and country code are validated for any country; numbers in
national format are validated for each region in `regions` (default: DEFAULT_REGIONS).
A number counts only at `Leniency.VALID`: a real number plan, a valid length, an assigned
range. To spare the matcher a pass over all the prose, it runs only on windows around
runs of digits, widened to whole whitespace-separated tokens so it sees the same
neighbouring characters as on the full text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

import phonenumbers
from phonenumbers import Leniency, PhoneNumberFormat, PhoneNumberMatcher

from ..errors import InvalidRequest
from .base import Detector, Span

__all__ = ["DEFAULT_REGIONS", "DETECTOR", "phone_detector"]

DEFAULT_REGIONS: tuple[str, ...] = ("US", "GB", "DE", "FR", "IN")

# Five or more digits among phone punctuation: every valid number of these plans has them.
_DIGIT_RUN = re.compile(r"\d(?:[\d \t().\-/\u00a0]*\d){4,}")
_MARGIN = 24  # room for a "+", a country code, an extension ("ext. 1234") around a run
# The layout of a US Social Security number. A number written this way is an SSN or a
# near-miss of one, not a phone (some are valid German numbers: 078-05-1120).
_SSN_LAYOUT = re.compile(r"\d{3}([- ])\d{2}\1\d{4}")


def _windows(text: str) -> Iterator[tuple[int, int]]:
    """Merged [start, end) windows around digit runs, widened to whitespace."""
    cur: tuple[int, int] | None = None
    for m in _DIGIT_RUN.finditer(text):
        start = max(0, m.start() - _MARGIN)
        end = min(len(text), m.end() + _MARGIN)
        while start > 0 and not text[start - 1].isspace():
            start -= 1
        while end < len(text) and not text[end].isspace():
            end += 1
        if cur is not None and start <= cur[1]:
            cur = (cur[0], max(cur[1], end))
            continue
        if cur is not None:
            yield cur
        cur = (start, end)
    if cur is not None:
        yield cur


def _find(text: str, regions: Sequence[str]) -> Iterator[Span]:
    for w_start, w_end in _windows(text):
        window = text[w_start:w_end]
        seen: set[tuple[int, int]] = set()
        for region in regions:
            for m in PhoneNumberMatcher(window, region, leniency=Leniency.VALID):
                if (m.start, m.end) in seen or _SSN_LAYOUT.fullmatch(m.raw_string):
                    continue
                seen.add((m.start, m.end))
                key = phonenumbers.format_number(m.number, PhoneNumberFormat.E164)
                yield Span(w_start + m.start, w_start + m.end, key)


def phone_detector(regions: Sequence[str] = DEFAULT_REGIONS) -> Detector:
    """A PHONE detector validating national-format numbers for `regions` (ISO 3166
    alpha-2 codes, as libphonenumber names them: "GB" not "UK"). Raises InvalidRequest
    for a region libphonenumber does not know. Each region costs one matcher pass over
    the digit windows."""
    regions = tuple(r.upper() for r in regions)
    unknown = [r for r in regions if r not in phonenumbers.SUPPORTED_REGIONS]
    if unknown:
        raise InvalidRequest(f"unknown phone region(s): {', '.join(unknown)}", param="regions")
    return Detector("PHONE", lambda text: _find(text, regions), f"phone numbers ({', '.join(regions)})")


DETECTOR = phone_detector()

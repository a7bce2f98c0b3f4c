"""PHONE: telephone numbers, validated with Google's libphonenumber metadata (the
`phonenumbers` package) rather than by shape.

Numbers written with a `+` and country code are validated for any country; numbers in
national format are validated for each region in `regions` (default: DEFAULT_REGIONS).
A number counts only at `Leniency.VALID`: a real number plan, a valid length, an assigned
range. Beyond what VALID checks, three rules keep other identifiers' digits out:

- In regions whose trunk prefix is 0 (GB, DE, FR, IN, ...) a number without "+" must be
  written with its 0, as people there write them: libphonenumber also accepts the bare
  national number ("16 99 68" as a German number), which in text is mostly parts of other
  things. India's bare ten-digit mobiles ("98765 43210") are the exception, being the
  usual way of writing them.
- A number must be the whole of its run of digit groups (digits joined by single spaces
  or dashes), not a piece: "030156" in the card-shaped "3424 030156 21183" is a Berlin
  number, and "12123450687" in the invalid "+44 12123450687" a US one, to the matcher's
  inner search. For the same reason nothing inside an IBAN's or a NINO's shape is taken
  ("NK 04 03 59 B" holds a Hamburg number).
- A number written in the layout of another identifier is left to it: a US SSN's
  (078-05-1120 is also a valid German number) or a dotted quad's (660.154.1.240 is also
  a valid Indian one).

To spare the matcher a pass over all the prose, it runs only on windows around runs of
digits, widened to whole whitespace-separated tokens so that it sees the same
neighbouring characters as on the full text; each region's pass after the first sees the
window with the numbers already found blanked out, and a region's pass runs only where
a number of that region could be found and kept (`_worth_a_pass`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import phonenumbers
from phonenumbers import Leniency, PhoneNumberFormat, PhoneNumberMatcher, PhoneNumberType

from ..errors import InvalidRequest
from .base import Detector, Span
from .iban import SHAPE as _IBAN_SHAPE
from .uk_nino import SHAPE as _NINO_SHAPE
from .windows import windows

__all__ = ["DEFAULT_REGIONS", "DETECTOR", "phone_detector"]

DEFAULT_REGIONS: tuple[str, ...] = ("US", "GB", "DE", "FR", "IN")

# Five or more digits among phone punctuation: no shorter number is valid as written in
# the default regions' plans.
_DIGIT_RUN = re.compile(r"\d(?:[\d \t().\-/\u00a0]*\d){4,}")
_MARGIN = 24  # room for a "+", a country code, an extension ("ext. 1234") around a run
# Layouts of other identifiers: a US SSN's and a dotted quad's.
_OTHER_LAYOUT = re.compile(r"\d{3}([- ])\d{2}\1\d{4}|\d{1,3}(?:\.\d{1,3}){3}")
_NON_DIGITS = re.compile(r"\D+")
_ZERO_LED = re.compile(r"(?<!\d)0\d")
_GROUP_RUN = re.compile(r"\d+(?:[ -]\d+)*")
_BARE_MOBILE_REGIONS = frozenset({"IN"})
_MOBILE_TYPES = frozenset({PhoneNumberType.MOBILE, PhoneNumberType.FIXED_LINE_OR_MOBILE})


def _written_as_issued(raw: str, number: phonenumbers.PhoneNumber, region: str) -> bool:
    """Whether `raw` is written the way numbers of `region` are written (module doc)."""
    if _OTHER_LAYOUT.fullmatch(raw):
        return False
    if raw.lstrip("( ").startswith("+"):
        return True
    metadata = phonenumbers.PhoneMetadata.metadata_for_region(region)
    if metadata is None or metadata.national_prefix != "0":
        return True
    if _NON_DIGITS.sub("", raw).startswith("0"):
        return True
    return region in _BARE_MOBILE_REGIONS and phonenumbers.number_type(number) in _MOBILE_TYPES


def _is_piece(window: str, start: int, end: int) -> bool:
    """Whether window[start:end] is part of a longer digit-group run, or of an IBAN's or a
    NINO's shape."""
    for run in _GROUP_RUN.finditer(window):
        if run.start() < end and start < run.end() and (run.start() < start or run.end() > end):
            return True
    shapes = (*_IBAN_SHAPE.finditer(window), *_NINO_SHAPE.finditer(window))
    return any(m.start() < end and start < m.end() for m in shapes)


class _Region(NamedTuple):
    code: str
    min_digits: int  # the shortest valid national significant number
    needs_zero: bool  # numbers without "+" are kept only when written with the trunk 0


def _region(code: str) -> _Region:
    metadata = phonenumbers.PhoneMetadata.metadata_for_region(code)
    lengths = metadata.general_desc.possible_length if metadata and metadata.general_desc else ()
    needs_zero = bool(metadata and metadata.national_prefix == "0" and code not in _BARE_MOBILE_REGIONS)
    return _Region(code, min(lengths, default=1), needs_zero)


def _worth_a_pass(window: str, max_digits: int, region: _Region, first: bool) -> bool:
    """False when the matcher cannot find in `window` a number of `region` that the rules
    above keep: none long enough, or no 0-led group where the trunk 0 is required. The
    first region's pass also takes the numbers with "+", whatever their country."""
    if first and "+" in window:
        return True
    if max_digits < region.min_digits:
        return False
    return not region.needs_zero or _ZERO_LED.search(window) is not None


def _find(text: str, regions: Sequence[_Region]) -> Iterator[Span]:
    for w_start, w_end in windows(text, _DIGIT_RUN, _MARGIN):
        window = text[w_start:w_end]
        max_digits = max(sum(c.isdigit() for c in run) for run in _DIGIT_RUN.findall(window))
        for n, region in enumerate(regions):
            if not _worth_a_pass(window, max_digits, region, n == 0):
                continue
            found = [
                m
                for m in PhoneNumberMatcher(window, region.code, leniency=Leniency.VALID)
                if _written_as_issued(m.raw_string, m.number, region.code)
                and not _is_piece(window, m.start, m.end)
            ]
            for m in found:
                key = phonenumbers.format_number(m.number, PhoneNumberFormat.E164)
                yield Span(w_start + m.start, w_start + m.end, key)
                # Later regions need not see it again; spaces keep every offset.
                window = window[: m.start] + " " * (m.end - m.start) + window[m.end :]
            if not _DIGIT_RUN.search(window):
                break


def phone_detector(regions: Sequence[str] = DEFAULT_REGIONS) -> Detector:
    """A PHONE detector validating national-format numbers for `regions` (ISO 3166
    alpha-2 codes, as libphonenumber names them: "GB" not "UK"). Raises InvalidRequest
    for a region libphonenumber does not know. Each region costs one matcher pass over
    the digit windows."""
    regions = tuple(r.upper() for r in regions)
    unknown = [r for r in regions if r not in phonenumbers.SUPPORTED_REGIONS]
    if unknown:
        raise InvalidRequest(f"unknown phone region(s): {', '.join(unknown)}", param="regions")
    plans = [_region(r) for r in regions]
    return Detector("PHONE", lambda text: _find(text, plans), f"phone numbers ({', '.join(regions)})")


DETECTOR = phone_detector()

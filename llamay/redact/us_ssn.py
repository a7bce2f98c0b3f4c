"""US_SSN: US Social Security numbers as the SSA issues them.

Written AAA-GG-SSSS or AAA GG SSSS (one kind of separator); a bare nine-digit run is not
taken, as too many other numbers look like it. Area 000, 666 and 900-999 are never
issued, nor group 00 or serial 0000; a few numbers known to be void (advertising and
sample numbers) are rejected too.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from .base import Detector, Span

__all__ = ["DETECTOR", "INVALID", "find", "ssn_ok"]

# 078-05-1120: printed in a 1938 wallet advertisement, void since; 219-09-9999: an SSA
# pamphlet's sample; 123-45-6789: the usual sample, never validly held.
INVALID = frozenset({"078051120", "219099999", "123456789"})
# Not inside a longer number: no word character or digit-and-separator on either side.
_SSN = re.compile(r"(\d(?<![\w-]\d)(?<!\d[ .]\d)\d{2})([- ])(\d{2})\2(\d{4})(?!\w|[ .-]\d)")


def ssn_ok(area: str, group: str, serial: str) -> bool:
    """Whether AAA-GG-SSSS is an issuable SSN (ASCII digit strings of 3, 2 and 4)."""
    a = int(area)
    return (
        a != 0
        and a != 666
        and a < 900
        and group != "00"
        and serial != "0000"
        and area + group + serial not in INVALID
    )


def find(text: str) -> Iterator[Span]:
    """Every issuable SSN; the key is its nine digits."""
    for m in _SSN.finditer(text):
        area, _, group, serial = m.groups()
        if ssn_ok(area, group, serial):
            yield Span(m.start(), m.end(), area + group + serial)


DETECTOR = Detector("US_SSN", find, "US Social Security numbers")

"""DATE_OF_BIRTH: a date, only where the text labels it as a date of birth.

Labels (any case): "DOB", "D.O.B.", "date of birth", "birth date", "birthdate", "born",
"born on", optionally followed by ":", "=", a dash, "is" or "was". Dates: 12/03/1985,
03-12-85, 12.03.1985 (day or month first), 1985-03-12, 12 March 1985, 12th of Mar 1985,
12-Mar-1985, March 12, 1985. The date must exist in the calendar (either reading of an
ambiguous numeric date) and, with a four-digit year, lie between 1850 and this year. The
finding covers the date only, not the label.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator

from .base import Detector, Span

__all__ = ["DETECTOR", "find"]

_MONTHS = {
    "jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6,
    "jul": 7, "aug": 8, "sep": 9, "oct": 10, "nov": 11, "dec": 12,
}  # fmt: skip
_MONTH = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
    r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?"
)
# Every label starts with b or d; the word-boundary check follows that letter so that `re`
# can scan for it first.
_LABEL = r"[bd](?<!\w[bd])(?:\.o\.b\.?|ob|ate[\s-]+of[\s-]+birth|irth[\s-]?date|orn(?:\s+on)?)"
_DATE = (
    r"(?P<n1>\d{1,2})(?P<s1>[/.-])(?P<n2>\d{1,2})(?P=s1)(?P<y1>\d{4}|\d{2})"
    r"|(?P<y2>\d{4})(?P<s2>[/.-])(?P<m2>\d{1,2})(?P=s2)(?P<d2>\d{1,2})"
    rf"|(?P<d3>\d{{1,2}})(?:st|nd|rd|th)?(?:\s+of)?[\s-]+(?P<m3>{_MONTH})[\s,-]+(?P<y3>\d{{4}})"
    rf"|(?P<m4>{_MONTH})\s+(?P<d4>\d{{1,2}})(?:st|nd|rd|th)?,?\s+(?P<y4>\d{{4}})"
)
_DOB = re.compile(
    rf"{_LABEL}(?!\w)[\s:=(–—-]*(?:(?:is|was)\s+)?(?P<date>{_DATE})(?!\w|[/.-]\d)",
    re.IGNORECASE,
)


def _exists(year: int, month: int, day: int, four_digit_year: bool) -> bool:
    if four_digit_year and not 1850 <= year <= dt.date.today().year:
        return False
    try:
        dt.date(year if four_digit_year else 2000 + year % 100, month, day)
    except ValueError:
        return False
    return True


def _valid(m: re.Match[str]) -> bool:
    if m["n1"]:
        a, b, y = int(m["n1"]), int(m["n2"]), m["y1"]
        # Day-month or month-day: a date of birth in either reading is one.
        return _exists(int(y), b, a, len(y) == 4) or _exists(int(y), a, b, len(y) == 4)
    if m["y2"]:
        return _exists(int(m["y2"]), int(m["m2"]), int(m["d2"]), True)
    day, month, year = (m["d3"], m["m3"], m["y3"]) if m["d3"] else (m["d4"], m["m4"], m["y4"])
    return _exists(int(year), _MONTHS[month[:3].lower()], int(day), True)


def find(text: str) -> Iterator[Span]:
    """Every labelled, existing date of birth; the key is the date as written, with
    whitespace collapsed and case folded."""
    for m in _DOB.finditer(text):
        if _valid(m):
            date = m["date"]
            yield Span(m.start("date"), m.end("date"), " ".join(date.split()).casefold())


DETECTOR = Detector("DATE_OF_BIRTH", find, "dates of birth (labelled)")

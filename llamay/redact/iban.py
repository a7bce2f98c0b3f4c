"""IBAN: International Bank Account Numbers, checked against the IBAN registry.

A candidate is a two-letter country code, two check digits and the BBAN, written together
or in the print format (groups of four separated by single spaces, the last group
shorter). It is an IBAN when its country is in the registry, its length is that country's
length, its check digits are 02-98 and the ISO 7064 mod-97 remainder is 1. Letters must be
upper case, as IBANs are written; a longer run of groups is cut at the country's length,
so a word in capitals after an IBAN is not taken into it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from .base import Detector, Span

__all__ = ["DETECTOR", "LENGTHS", "SHAPE", "find", "iban_ok"]

# Total IBAN length per country, from the SWIFT IBAN registry (release 2024+).
LENGTHS: dict[str, int] = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22,
    "BH": 22, "BI": 27, "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24,
    "DE": 22, "DJ": 27, "DK": 18, "DO": 28, "EE": 20, "EG": 29, "ES": 24, "FI": 18,
    "FK": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27,
    "GT": 28, "HN": 28, "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26,
    "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32, "LI": 21, "LT": 20,
    "LU": 20, "LV": 21, "LY": 25, "MC": 27, "MD": 24, "ME": 22, "MK": 19, "MN": 20,
    "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18, "NO": 15, "OM": 23, "PK": 24,
    "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "RU": 33, "SA": 24,
    "SC": 31, "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25,
    "SV": 28, "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
    "YE": 30,
}  # fmt: skip
# The shape of an IBAN, valid or not (other detectors leave such text alone).
SHAPE = re.compile(r"[A-Z](?<!\w[A-Z])[A-Z]\d{2}(?:[A-Z0-9]{11,30}(?!\w)|(?: [A-Z0-9]{1,4})+)")


def iban_ok(compact: str) -> bool:
    """Whether `compact` (no spaces, upper case) is a valid IBAN: known country, that
    country's length, check digits 02-98, mod-97 remainder 1."""
    if LENGTHS.get(compact[:2]) != len(compact) or not "02" <= compact[2:4] <= "98":
        return False
    rearranged = compact[4:] + compact[:4]
    # int(c, 36) maps 0-9 to themselves and A-Z to 10-35, as ISO 13616 prescribes.
    return int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1


def _cut(text: str, start: int, end: int) -> int | None:
    """The end of the IBAN that begins at `start` in the candidate text[start:end], cut at
    its country's length on a group boundary, or None when it does not fit."""
    length = LENGTHS.get(text[start : start + 2])
    if length is None:
        return None
    if " " not in text[start:end]:
        return end if end - start == length else None
    # Print format: "CCkk" then groups of four; only the last group may be shorter.
    pos, have = start + 4, 4
    while have < length:
        if pos >= end or text[pos] != " ":
            return None
        group_end = pos + 1
        while group_end < end and text[group_end] != " ":
            group_end += 1
        size = group_end - pos - 1
        if size != min(4, length - have):
            return None
        have += size
        pos = group_end
    # The cut must not split a token: "... 7654 32AB" is not an IBAN followed by "AB".
    return pos if pos == len(text) or not text[pos].isalnum() else None


def find(text: str) -> Iterator[Span]:
    """Every valid IBAN; the key is its compact form."""
    for m in SHAPE.finditer(text):
        end = _cut(text, m.start(), m.end())
        if end is None:
            continue
        compact = text[m.start() : end].replace(" ", "")
        if iban_ok(compact):
            yield Span(m.start(), end, compact)


DETECTOR = Detector("IBAN", find, "IBANs (registry lengths, mod-97)")

"""CARD_NUMBER: payment card numbers, checked the way issuers issue them.

A number is a card number when its digits pass the Luhn check, its leading digits fall in
an issuer's IIN range and its length is one that issuer uses. Digits may be written
together or in groups separated by single spaces or dashes (one kind per number), in the
layouts cards are printed with: fours (the last group shorter), or 4-6-5 / 4-6-4 (Amex,
Diners). A card inside a longer run of digit groups (a year before it, a CVV after it) is
found as long as it starts and ends on group boundaries, unless the run goes on after it
in another group of four with the same separator to a length cards have: "6759 5443 2919
1302" with a wrong check digit does not yield the Luhn-valid twelve-digit Maestro number
at its head, while "4111 1111 1111 1111 2025" yields the card. Nor is a run taken when a
group of letters and digits adjoins it across one separator: "SE56 4526 5176 2858 3763
259" is an IBAN of the wrong length, not a Visa number after a word.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from .base import Detector, Span

__all__ = ["DETECTOR", "find", "issuer", "luhn_ok"]

# (issuer, IIN ranges as inclusive (low, high) prefixes of equal length, valid lengths)
_ISSUERS: tuple[tuple[str, tuple[tuple[str, str], ...], frozenset[int]], ...] = (
    ("visa", (("4", "4"),), frozenset({13, 16, 19})),
    ("mastercard", (("51", "55"), ("2221", "2720")), frozenset({16})),
    ("amex", (("34", "34"), ("37", "37")), frozenset({15})),
    (
        "discover",
        (("6011", "6011"), ("644", "649"), ("65", "65"), ("622126", "622925")),
        frozenset(range(16, 20)),
    ),
    ("jcb", (("3528", "3589"),), frozenset(range(16, 20))),
    ("diners", (("300", "305"), ("3095", "3095"), ("36", "36"), ("38", "39")), frozenset(range(14, 20))),
    ("unionpay", (("62", "62"),), frozenset(range(16, 20))),
    (
        "maestro",
        (("5018", "5018"), ("5020", "5020"), ("5038", "5038"), ("5893", "5893"), ("6304", "6304"))
        + (("6759", "6759"), ("6761", "6763")),
        frozenset(range(12, 20)),
    ),
)
_MIN_DIGITS, _MAX_DIGITS = 12, 19
# A maximal run of digit groups joined by single spaces or dashes, not glued to a word or
# to a decimal number on either side. (The check before the run follows its first digit,
# so that `re` can scan for a digit first; likewise in the other detectors.)
_RUN = re.compile(r"\d(?<![\w.,]\d)\d*(?:[ -]\d+)*(?!\w|[.,]\d)")
_GROUP = re.compile(r"\d+")
# A group of letters and digits next to the run, across one separator ("SE56 4526 ..."):
# the digits belong to an alphanumeric code such as an IBAN, valid or not.
_CODE_BEFORE = re.compile(r"[A-Za-z0-9]*(?:[A-Za-z]\d|\d[A-Za-z])[A-Za-z0-9]*[ -]\Z")
_CODE_AFTER = re.compile(r"[ -][A-Za-z0-9]*(?:[A-Za-z]\d|\d[A-Za-z])")


def luhn_ok(digits: str) -> bool:
    """The Luhn (mod 10) check over a string of ASCII digits."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def issuer(digits: str) -> str | None:
    """The issuer whose IIN range and lengths fit `digits`, or None."""
    for name, ranges, lengths in _ISSUERS:
        if len(digits) not in lengths:
            continue
        for low, high in ranges:
            if low <= digits[: len(low)] <= high:
                return name
    return None


def _layout_ok(sizes: list[int]) -> bool:
    if len(sizes) == 1:
        return True
    if sizes in ([4, 6, 5], [4, 6, 4]):
        return True
    return all(s == 4 for s in sizes[:-1]) and 1 <= sizes[-1] <= 4


def _continues(text: str, last: tuple[int, int], nxt: tuple[int, int], seps: set[str], n_digits: int) -> bool:
    """Whether a printed number of `n_digits` goes on past `last` into a further group of
    four with the same separator and is still of card length: then the card is the longer
    number (valid or not), not its head."""
    return nxt[1] - nxt[0] == 4 and text[last[1]] in seps and n_digits + 4 <= _MAX_DIGITS


def _in_code(text: str, start: int, end: int) -> bool:
    return bool(_CODE_BEFORE.search(text, max(0, start - 40), start) or _CODE_AFTER.match(text, end))


def find(text: str) -> Iterator[Span]:
    """Every valid card number; the key is its digits. Candidates inside one run may
    overlap (the resolver keeps the longest)."""
    for run in _RUN.finditer(text):
        if run.end() - run.start() < _MIN_DIGITS or _in_code(text, run.start(), run.end()):
            continue
        groups = [(g.start(), g.end()) for g in _GROUP.finditer(text, run.start(), run.end())]
        for i in range(len(groups)):
            n_digits = 0
            for j in range(i, len(groups)):
                n_digits += groups[j][1] - groups[j][0]
                if n_digits > _MAX_DIGITS:
                    break
                if n_digits < _MIN_DIGITS:
                    continue
                # One kind of separator per number: "4111 1111-1111 1111" is not printed.
                seps = {text[groups[k][1]] for k in range(i, j)}
                if len(seps) > 1 or not _layout_ok([e - s for s, e in groups[i : j + 1]]):
                    continue
                if (
                    seps
                    and j + 1 < len(groups)
                    and _continues(text, groups[j], groups[j + 1], seps, n_digits)
                ):
                    continue
                start, end = groups[i][0], groups[j][1]
                digits = "".join(text[s:e] for s, e in groups[i : j + 1])
                if luhn_ok(digits) and issuer(digits):
                    yield Span(start, end, digits)


DETECTOR = Detector("CARD_NUMBER", find, "payment card numbers (Luhn, IIN ranges, lengths)")

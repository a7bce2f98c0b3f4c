"""The finer rules that keep one identifier's digits from being read as another's."""

from __future__ import annotations

import re

import pytest

from llamay.redact import redact
from llamay.redact.windows import windows


def found(text: str, types: list[str] | None = None) -> list[tuple[str, str]]:
    return [(f.type, text[f.start : f.end]) for f in redact(text, types).findings]


@pytest.mark.parametrize(
    "text",
    [
        "ref KN 16 99 68 A",  # "16 99 68" is a valid German number without its trunk 0
        "ref NK 04 03 59 B",  # "04 03 59" is a Hamburg number
        "host 660.154.1.240",  # a valid Indian number, written as a dotted quad
        "ssn 078-05-1120",  # void SSN; also a valid German number
        "card 3424 030156 21183",  # holds "030156", a Berlin number
        "call +44 12123450687",  # invalid UK number; its tail is a valid US one
        "iban GB88 QLDB 0974 3270 3902 232",  # bad IBAN; its digits are a valid number
    ],
)
def test_other_identifiers_digits_are_not_phones(text: str) -> None:
    assert found(text) == []


def test_phone_written_forms() -> None:
    assert found("Tel +1 650-253-0000 ext. 123.") == [("PHONE", "+1 650-253-0000 ext. 123")]
    assert found("call (650) 253-0000 or 650.253.0000") == [
        ("PHONE", "(650) 253-0000"),
        ("PHONE", "650.253.0000"),
    ]
    assert found("UK: +44 (0)20 7946 0958, 0044 20 7946 0958") == [
        ("PHONE", "+44 (0)20 7946 0958"),
        ("PHONE", "0044 20 7946 0958"),
    ]
    # Indian mobiles are written without the trunk 0; German numbers are not.
    assert found("mobile 98765 43210") == [("PHONE", "98765 43210")]
    assert found("Berlin 30 901820") == []


def test_card_digits_inside_an_alphanumeric_code_are_not_a_card() -> None:
    # A wrong-length Swedish IBAN whose digit groups are a valid 19-digit Visa number.
    assert found("SE56 4526 5176 2858 3763 259") == []
    assert found("Visa 4526 5176 2858 3763 259 today") == [("CARD_NUMBER", "4526 5176 2858 3763 259")]


def test_email_and_ipv6_in_long_tokens() -> None:
    token = "x" * 200
    assert found(f"{token}<jane@example.org>{token}") == [("EMAIL", "jane@example.org")]
    assert found(f"{token}jane@example.org {token}") == []  # a local part of 204 characters
    assert found("at 10:30:45, fe80::1: then 2001:db8::") == [
        ("IP_ADDRESS", "fe80::1"),
        ("IP_ADDRESS", "2001:db8::"),
    ]


def test_windows_reach_whitespace_and_merge() -> None:
    text = "aa bb@cc dd ee@ff gg hh"
    at = re.compile("@")
    assert [text[s:e] for s, e in windows(text, at)] == ["bb@cc", "ee@ff"]
    assert [text[s:e] for s, e in windows(text, at, margin=4)] == ["aa bb@cc dd ee@ff gg"]
    assert list(windows("@x", at)) == [(0, 2)]
    assert list(windows("no hits", at)) == []

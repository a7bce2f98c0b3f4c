"""Standard `format`s beyond llguidance's own (keywords.FORMATS) that the grammar enforces
as patterns: json-pointer, relative-json-pointer and uri-template are regular languages.

`PATTERN_FORMATS` holds each as an anchored ECMA-262 pattern (what the compiler adds next
to the string's other keywords); `check_format` is the same check for `validate`. Every
pattern is unambiguous (no nested repetition that can match one text two ways), so the
after-the-fact check runs in linear time on Python's `re`.
"""

from __future__ import annotations

import re

__all__ = ["PATTERN_FORMATS", "check_format"]

_PCT = r"%[0-9A-Fa-f]{2}"
_VARCHAR = rf"(?:[A-Za-z0-9_]|{_PCT})"
_VARSPEC = rf"{_VARCHAR}(?:\.?{_VARCHAR})*(?::[1-9][0-9]{{0,3}}|\*)?"
_EXPRESSION = rf"\{{[+#./;?&=,!@|]?{_VARSPEC}(?:,{_VARSPEC})*\}}"

PATTERN_FORMATS: dict[str, str] = {
    # RFC 6901
    "json-pointer": r"^(?:/(?:[^~/]|~[01])*)*$",
    # draft-handrews-relative-json-pointer-01
    "relative-json-pointer": r"^(?:0|[1-9][0-9]*)(?:#|(?:/(?:[^~/]|~[01])*)*)$",
    # RFC 6570: literals (an apostrophe included, as the JSON Schema Test Suite has it)
    # and expressions
    "uri-template": rf"^(?:[^\x00-\x20\"%<>\\^`{{|}}\x7f]|{_PCT}|{_EXPRESSION})*$",
}
_COMPILED = {name: re.compile(pattern) for name, pattern in PATTERN_FORMATS.items()}


def check_format(name: str, value: str) -> bool:
    """Whether `value` is valid under format `name` (one of PATTERN_FORMATS)."""
    return _COMPILED[name].search(value) is not None

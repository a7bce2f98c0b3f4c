"""EMAIL: an RFC 5322 dot-atom local part, `@`, and a domain of at least two labels whose
last label has the shape of a top-level domain (letters only, or an `xn--` IDN label).

Unicode letters are accepted in both parts (RFC 6531 addresses, IDN domains). Quoted local
parts and domain literals (`"a b"@x.org`, `a@[10.0.0.1]`) are not matched: they are rare in
prose and their bounds are ambiguous there. The TLD is checked for shape, not against the
IANA list, which changes; so `icon@2x.png` is found.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from .base import Detector, Span
from .windows import windows

__all__ = ["DETECTOR", "find"]

# RFC 5322 atext; the first character must be a word character so that a quote or slash
# in front of an address in prose is not taken as part of it.
_ATOM = r"[\w!#$%&'*+/=?^`{|}~-]"
# A hostname label: letters/digits/hyphens, no leading or trailing hyphen, at most 63.
_LABEL = r"[^\W_](?:[\w-]{0,61}[^\W_])?"
_TLD = r"(?:[^\W\d_]{2,63}|(?i:xn--)[A-Za-z0-9-]{1,59})"
_MAX_LOCAL = 64
_MAX_DOMAIN = 253
_EMAIL = re.compile(
    # The lookahead bounds the local part to its 64 characters before the pattern proper
    # runs, so a long run of atom characters ending in "@" costs 64 steps per start, not
    # the rest of the run (which made "a!a!...a!@" quadratic).
    rf"(?<![\w.%+-])(?=[\w.!#$%&'*+/=?^`{{|}}~-]{{1,{_MAX_LOCAL}}}@)"
    rf"(?P<local>\w{_ATOM}*(?:\.{_ATOM}+)*)@(?P<domain>(?:{_LABEL}\.)+{_TLD})"
    # Not the head of a longer token: `a@b.com-x` or `a@b.com.x` are not addresses.
    r"(?![\w-]|\.[^\W_])"
)
_AT = re.compile("@")


def find(text: str) -> Iterator[Span]:
    """Every well-formed address; the key is the address casefolded."""
    for start, end in windows(text, _AT):
        for m in _EMAIL.finditer(text, start, end):
            if len(m["local"]) <= _MAX_LOCAL and len(m["domain"]) <= _MAX_DOMAIN:
                yield Span(m.start(), m.end(), m.group().casefold())


DETECTOR = Detector("EMAIL", find, "e-mail addresses")

"""IP_ADDRESS: IPv4 and IPv6 addresses, each candidate validated by `ipaddress`.

IPv4 in dotted-quad form (no leading zeros, as `ipaddress` requires); IPv6 in any RFC 4291
text form, including embedded IPv4 and a zone ("fe80::1%eth0"). The unspecified address
"::" alone is not taken: it identifies nobody and is mostly punctuation in prose. Clock
times and MAC addresses fail validation and are left alone.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator

from .base import Detector, Span
from .windows import windows

__all__ = ["DETECTOR", "find"]

_V4 = r"(?:\d{1,3}\.){3}\d{1,3}"
# The boundary check follows the first digit, so that `re` can scan for a digit first.
_IPV4 = re.compile(r"\d(?<![\w.]\d)\d{0,2}\.(?:\d{1,3}\.){2}\d{1,3}(?!\w|\.\d)")
_IPV6 = re.compile(
    rf"(?<![\w:.])(?:[0-9A-Fa-f]{{0,4}}:){{2,7}}(?:{_V4}|[0-9A-Fa-f]{{0,4}})(?:%[\w.-]+)?"
    # A trailing colon is punctuation ("at fe80::1: ..."), a colon and a hex digit is not.
    r"(?!\w|:[0-9A-Fa-f:]|\.\d)"
)
_HEX = re.compile(r"[0-9A-Fa-f]")
# Every IPv6 address has two colons at most four hex digits apart.
_COLONS = re.compile(r":[0-9A-Fa-f]{0,4}:")


def find(text: str) -> Iterator[Span]:
    """Every valid IPv4 and IPv6 address; the key is its compressed form."""
    for m in _IPV4.finditer(text):
        try:
            key = str(ipaddress.IPv4Address(m.group()))
        except ValueError:
            continue
        yield Span(m.start(), m.end(), key)
    for start, end in windows(text, _COLONS):
        for m in _IPV6.finditer(text, start, end):
            candidate = m.group()
            # The pattern takes a colon of punctuation too ("fe80::1: ..."); give it back.
            if candidate.endswith(":") and not candidate.endswith("::"):
                candidate = candidate[:-1]
            if not _HEX.search(candidate):
                continue
            try:
                key = str(ipaddress.IPv6Address(candidate))
            except ValueError:
                continue
            yield Span(m.start(), m.start() + len(candidate), key)


DETECTOR = Detector("IP_ADDRESS", find, "IPv4 and IPv6 addresses")

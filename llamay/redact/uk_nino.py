"""UK_NINO: UK National Insurance numbers as HMRC allocates them.

Two prefix letters, six digits, a suffix A-D; spaces allowed between the pairs
("AB 12 34 56 C"). Neither prefix letter may be D, F, I, Q, U or V, the second may not be
O, and the prefixes BG, GB, KN, NK, NT, TN and ZZ are never allocated. Letters must be
upper case, as the numbers are printed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from .base import Detector, Span

__all__ = ["DETECTOR", "SHAPE", "find", "prefix_ok"]

_BAD_FIRST = frozenset("DFIQUV")
_BAD_SECOND = frozenset("DFIQUVO")
_BAD_PREFIXES = frozenset({"BG", "GB", "KN", "NK", "NT", "TN", "ZZ"})
# The word-boundary check follows the first letter so that `re` can scan for it first.
# The shape of a NINO, allocatable or not (other detectors leave such text alone).
SHAPE = re.compile(r"[A-Z](?<!\w[A-Z])[A-Z] ?\d{2} ?\d{2} ?\d{2} ?[A-Z](?!\w)")
_NINO = re.compile(r"([A-Z](?<!\w[A-Z])[A-Z]) ?(\d{2}) ?(\d{2}) ?(\d{2}) ?([A-D])(?!\w)")


def prefix_ok(prefix: str) -> bool:
    """Whether a two-letter upper-case prefix can begin a NINO."""
    return prefix[0] not in _BAD_FIRST and prefix[1] not in _BAD_SECOND and prefix not in _BAD_PREFIXES


def find(text: str) -> Iterator[Span]:
    """Every allocatable NINO; the key is its compact form."""
    for m in _NINO.finditer(text):
        if prefix_ok(m[1]):
            yield Span(m.start(), m.end(), "".join(m.groups()))


DETECTOR = Detector("UK_NINO", find, "UK National Insurance numbers")

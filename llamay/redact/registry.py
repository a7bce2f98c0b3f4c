"""The registry: detector name -> detector, in priority order.

Adding a detector is one module exposing a `Detector` and one entry below (or a call to
`register` at run time). Order matters only to break ties between equally long findings
at the same place: the most specific checks come first and PHONE last, because a phone
plan accepts many digit strings that a checksum or issuing rule would reject.
"""

from __future__ import annotations

from . import card_number, date_of_birth, email_address, iban, ip_address, phone, uk_nino, us_ssn
from .base import Detector

__all__ = ["DETECTORS", "register"]

DETECTORS: dict[str, Detector] = {}


def register(detector: Detector) -> Detector:
    """Add `detector` under its name (replacing one of that name in place, keeping its
    priority; a new name goes last). Returns it."""
    DETECTORS[detector.name] = detector
    return detector


for _detector in (
    email_address.DETECTOR,
    card_number.DETECTOR,
    iban.DETECTOR,
    us_ssn.DETECTOR,
    uk_nino.DETECTOR,
    ip_address.DETECTOR,
    date_of_birth.DETECTOR,
    phone.DETECTOR,
):
    register(_detector)

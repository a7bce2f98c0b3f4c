"""Rule-based redaction of personal data; everything runs in-process, nothing leaves the
machine.

    from llamay.redact import redact
    result = redact("mail jane@example.org", style="pseudonym")
    result.text      # "mail [EMAIL_1]"
    result.findings  # [Finding(type="EMAIL", start=5, end=21, source="rules")]

Each detector (one module each) checks identifiers the way they are issued: Luhn and IIN
ranges for cards, registry lengths and mod-97 for IBANs, libphonenumber metadata for
phones, SSA and HMRC allocation rules, `ipaddress` for IPs; dates of birth only where
labelled. DETECTORS is the registry (name -> Detector, priority order).
"""

from __future__ import annotations

from .base import Detector, Finding, Span
from .core import RedactResult, redact
from .phone import DEFAULT_REGIONS, phone_detector
from .registry import DETECTORS, register
from .styles import STYLES, Style

__all__ = [
    "DEFAULT_REGIONS",
    "DETECTORS",
    "STYLES",
    "Detector",
    "Finding",
    "RedactResult",
    "Span",
    "Style",
    "phone_detector",
    "redact",
    "register",
]

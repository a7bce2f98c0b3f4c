"""`redact`: find personal data with the registered detectors and replace it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidRequest
from .base import Detector, Finding
from .registry import DETECTORS
from .resolve import Candidate, resolve
from .styles import STYLES, Style, render

__all__ = ["RedactResult", "redact"]


@dataclass(frozen=True, slots=True)
class RedactResult:
    """The redacted text and what was redacted (offsets into the *input* text)."""

    text: str
    findings: list[Finding] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "findings": [f.to_dict() for f in self.findings]}


def _select(types: Sequence[str] | None, registry: Mapping[str, Detector]) -> list[tuple[int, Detector]]:
    ranked = list(enumerate(registry.values()))
    if types is None:
        return ranked
    wanted = [types] if isinstance(types, str) else list(types)
    unknown = [t for t in wanted if t not in registry]
    if unknown:
        raise InvalidRequest(
            f"unknown redaction type(s): {', '.join(unknown)} (known: {', '.join(registry)})",
            param="types",
        )
    return [(rank, d) for rank, d in ranked if d.name in wanted]


def redact(
    text: str,
    types: Sequence[str] | None = None,
    style: Style = "type",
    *,
    detectors: Mapping[str, Detector] | None = None,
) -> RedactResult:
    """Redact `text` with the detectors named in `types` (all registered ones when None;
    a single string is one name) in `style` ("type", "mask" or "pseudonym").

    Findings are disjoint and sorted by start; where candidates overlap, the longest wins,
    then the earlier start, then the detector earlier in the registry. `detectors`
    replaces the registry for this call (same order rule). Raises InvalidRequest naming
    any unknown type or an unknown style. Nothing leaves the process.
    """
    if style not in STYLES:
        raise InvalidRequest(
            f"unknown redaction style: {style!r} (known: {', '.join(STYLES)})", param="style"
        )
    registry = DETECTORS if detectors is None else detectors
    candidates = [
        Candidate(span.start, span.end, rank, detector.name, span.key)
        for rank, detector in _select(types, registry)
        for span in detector.find(text)
    ]
    winners = resolve(candidates)
    findings = [Finding(c.type, c.start, c.end) for c in winners]
    return RedactResult(render(text, winners, style), findings)

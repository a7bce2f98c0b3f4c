"""What a model's chat template and vocabulary say about it: its tool-call format and its
think markers. Computed once when the model loads (`LoadedModel.traits`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from .reasoning import ReasoningMarkers, detect_reasoning
from .tools import Special, ToolFormat, detect_format

__all__ = ["Traits", "detect_traits"]


@dataclass(frozen=True)
class Traits:
    tool_format: ToolFormat
    reasoning: ReasoningMarkers | None


def detect_traits(template_source: str | None, special: Special) -> Traits:
    """The traits of a model whose chat template is `template_source`; `special` maps a
    text to its id when it is one special token of the vocabulary (`Model.special_id`).
    A format whose calls may come before the think block is closed (Kimi K2) ends the
    block at its call markers."""
    fmt = detect_format(template_source, special)
    reasoning = detect_reasoning(template_source, special)
    interrupts = getattr(fmt, "interrupts", ())
    if reasoning is not None and reasoning.style == "tags" and interrupts:
        reasoning = replace(reasoning, interrupts=tuple(interrupts))
    return Traits(fmt, reasoning)

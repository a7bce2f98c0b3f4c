"""The keyword options of the generating methods, typed for editors and type checkers
(see `Options` for their meaning)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict

__all__ = ["ChatKw", "CompleteKw"]


class CompleteKw(TypedDict, total=False):
    max_tokens: int | None
    temperature: float | None
    top_p: float | None
    top_k: int | None
    min_p: float | None
    seed: int | None
    stop: str | Sequence[str] | None
    output: Any


class ChatKw(CompleteKw, total=False):
    system: str | None
    tools: Sequence[Any] | None
    tool_choice: str
    run_tools: bool
    max_tool_rounds: int
    thinking: bool | int | None

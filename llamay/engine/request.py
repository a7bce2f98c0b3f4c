"""What the engine is asked to do, and the running state of one request."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..types import Event, SamplingParams, StopSpec

__all__ = ["GenerateRequest", "Handle", "Sink"]

Sink = Callable[[Event], None]
_ids = itertools.count(1)


@dataclass(frozen=True)
class GenerateRequest:
    """One generation. `tokens` is the full prompt. `constraint` is a grammar constraint
    object (see llamay.grammar) or None. The engine never knows which API asked."""

    tokens: list[int]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stop: StopSpec = field(default_factory=StopSpec)
    constraint: Any = None
    id: int = field(default_factory=lambda: next(_ids))


class Handle:
    """The caller's side of a submitted request: abort it from any thread."""

    def __init__(self, request: GenerateRequest, wake: Callable[[], None] = lambda: None) -> None:
        self.request = request
        self.submitted = time.perf_counter()
        self._aborted = threading.Event()
        self._wake = wake

    def abort(self) -> None:
        """Ask the engine to stop this request and free its KV within one step."""
        self._aborted.set()
        self._wake()

    @property
    def aborted(self) -> bool:
        return self._aborted.is_set()

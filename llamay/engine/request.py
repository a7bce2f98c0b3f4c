"""What the engine is asked to do, and the running state of one request."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..types import Event, SamplingParams, StopSpec

__all__ = ["ConstraintPlan", "GenerateRequest", "Handle", "SessionSpec", "Sink"]

Sink = Callable[[Event], None]
_ids = itertools.count(1)


@dataclass(frozen=True)
class ConstraintPlan:
    """When and how output is constrained.

    `grammar` (a llamay.grammar.Grammar) constrains the text from activation on. With no
    trigger the constraint is active from the first generated token. Otherwise it switches
    on lazily, right after the model samples one of `trigger_tokens` (a real special token,
    so the same text quoted in content never triggers) or, for formats without such a
    token, once the generated text ends with `trigger_text`; the grammar then describes
    what follows the trigger. Before activation sampling is free (thinking, prose).
    `grammar` None: only the thinking budget.

    The thinking budget. While a think block is open (from the start when `thinking`, the
    prompt having opened it; or once the output ends with `think_open`), the engine forces
    `close` (the family's marker, one token or several: e.g. gpt-oss's channel switch), token
    by token, as soon as `budget` tokens were generated or fewer than the answer's room is
    left of `max_tokens`: `reserve_share` of `max_tokens`, or `reserve` tokens when that is
    less (and set). A block the model closes itself (the output ends with `close`'s first token) is
    not forced again, nor is a block opened after one closed. `budget_token` alone (older
    callers) means `close=(budget_token,)` with `thinking` true.
    """

    grammar: Any
    trigger_tokens: frozenset[int] = frozenset()
    trigger_text: str | None = None
    budget: int | None = None
    budget_token: int | None = None
    label: str = "grammar"
    close: tuple[int, ...] = ()
    thinking: bool = False
    think_open: tuple[int, ...] = ()
    reserve: int = 0
    reserve_share: float = 0.0

    @property
    def close_tokens(self) -> tuple[int, ...]:
        """The marker forced when the budget is spent (empty: no budget)."""
        if self.close:
            return self.close
        return (self.budget_token,) if self.budget_token is not None else ()

    @property
    def starts_thinking(self) -> bool:
        return self.thinking or (not self.close and self.budget_token is not None)

    def answer_room(self, max_tokens: int | None) -> int:
        """Tokens kept for the answer after the close, under `max_tokens`."""
        if max_tokens is None:
            return 0
        share = int(self.reserve_share * max_tokens)
        return min(self.reserve, share) if self.reserve else share

    @property
    def lazy(self) -> bool:
        return bool(self.trigger_tokens) or self.trigger_text is not None


@dataclass(frozen=True)
class SessionSpec:
    """Run on a server-held context. `create`: the prompt becomes a new context (with
    `owner`, `marking`), usually with max_tokens 0. Otherwise the prompt starts with what
    context `context_id` holds (the API checked, and marked the context busy); after the
    request the context holds prompt + reply."""

    context_id: str | None = None
    create: bool = False
    owner: str | None = None
    marking: str | None = None


@dataclass(frozen=True)
class GenerateRequest:
    """One generation. `tokens` is the full prompt. The engine never knows which API asked."""

    tokens: list[int]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stop: StopSpec = field(default_factory=StopSpec)
    constraint: ConstraintPlan | None = None
    session: SessionSpec | None = None
    # None: the default (an n-gram repetition penalty while a grammar constrains output).
    repetition: Any = None
    cache: bool = True  # share a cached prefix in, and keep this one for later requests
    # Score the prompt's own tokens with this many top alternatives each (None: no). Every
    # prompt position is then computed (no cached prefix is shared in: its logits are gone)
    # and the FinishEvent carries the scores.
    prompt_logprobs: int | None = None
    # With prompt_logprobs: the first prompt token to score (at least 1). The tokens before
    # it may come from a cached prefix, so continuations of one prompt share its KV.
    score_from: int = 1
    # The tenant namespace of the prefix cache: the request attaches only to prefixes of
    # this namespace (or shared ones), and what it computes stays in it. "" is the
    # single-user namespace; the engine never interprets the string.
    namespace: str = ""
    # Who is served: the engine shares admission and the running set fairly between
    # tenants, each charged for the tokens computed for it, divided by its `weight`
    # (engine/scheduler.py, Ledger). "" is the single user; the engine never interprets
    # the string, only compares it.
    tenant: str = ""
    weight: float = 1.0
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

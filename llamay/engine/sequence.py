"""The engine's state for one running request (owned by the engine thread)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..grammar import CompileCache, Constraint, allocate_mask
from ..types import FinishEvent, FinishReason, PromptLogprob, SamplingParams, Usage
from .repetition import NgramPenalty, RepetitionParams
from .request import ConstraintPlan, GenerateRequest, Handle, Sink
from .sampler import Sampler
from .textstream import TextStream

__all__ = ["Sequence"]


class Sequence:
    """A request bound to a llama sequence id. `tokens` holds prompt + sampled tokens;
    `n_past` of them are in the KV cache."""

    def __init__(
        self,
        handle: Handle,
        sink: Sink,
        seq_id: int,
        n_vocab: int,
        seed: int,
        structural: np.ndarray | None = None,
        pieces: list[bytes] | None = None,
    ) -> None:
        req: GenerateRequest = handle.request
        self.handle = handle
        self.request = req
        self.sink = sink
        self.seq_id = seq_id
        self.tokens: list[int] = list(req.tokens)
        self.n_prompt = len(req.tokens)
        self.n_past = 0
        self.n_cached = 0
        # A running request whose prompt starts like this one's: this one computes nothing
        # until `follows` has computed `follow_to` positions, then shares its cells.
        self.follows: Sequence | None = None
        self.follow_to = 0
        self.share_limit = 0  # the most positions this request may take from others
        self.prompt_scores: list[PromptLogprob] = []  # see GenerateRequest.prompt_logprobs
        params: SamplingParams = req.sampling
        self.sampler = Sampler(params, n_vocab, seed, req.tokens, pieces)  # pieces: DRY's breakers
        self.text = TextStream(req.stop.stop)
        self.plan: ConstraintPlan | None = req.constraint
        self.active = False  # the plan's trigger fired (or it had none)
        # The think block: open now; closed once (never forced again); close tokens still to force.
        self.thinking = self.plan is not None and self.plan.starts_thinking
        self.thought = False
        self.forcing: list[int] = []
        self.constraint: Constraint | None = None
        self.mask: np.ndarray | None = None
        self.ngram: NgramPenalty | None = None
        rep: RepetitionParams = req.repetition or RepetitionParams()
        has_grammar = self.plan is not None and self.plan.grammar is not None
        if has_grammar and rep.enabled and rep.multiplier > 0 and structural is not None:
            self.ngram = NgramPenalty(rep, structural, req.tokens)
        # Steering to a shortest completion when max_tokens runs low (sampling_step._fit):
        # the tokens of it still to force (also the tail of a token written in the JSON
        # layout, sampling_step._in_layout), whether it began, and its length as last measured
        # (at n_generated `room_at`, -1: not yet; a `room` of -1: none fitted).
        self.closing: list[int] = []
        self.closed_early = False
        self.room = 0
        self.room_at = -1
        self.spec: Any = None  # its speculation.SpecState, once it decodes with speculation on
        self.mask_steps = 0
        self.mask_seconds = 0.0
        self.decode_seconds = 0.0
        self.t_admit = time.perf_counter()
        self.t_first: float | None = None
        self.done = False

    def activate(self, cache: CompileCache) -> None:
        """Switch the constraint on (from now on every token is masked), compiling through
        the model's `cache`; a plan without a grammar only ends the unconstrained budget."""
        assert self.plan is not None
        self.active = True
        if self.plan.grammar is not None:
            self.constraint = Constraint(self.plan.grammar, cache)
            self.mask = allocate_mask(cache.tokenizer)

    def budget_token(self) -> int | None:
        """The token to force now because the thinking budget is spent, if any (see
        ConstraintPlan): the next one of the close marker once forcing has begun."""
        plan = self.plan
        if self.forcing:
            return self.forcing[0]
        if plan is None or not self.thinking or self.thought:
            return None
        close = plan.close_tokens
        if not close:
            return None
        spent = plan.budget is not None and self.n_generated >= plan.budget
        limit = self.request.stop.max_tokens
        if limit is not None and plan.budget is None and not plan.reserve and not plan.reserve_share:
            limit = None  # no budget and no room to keep: think to the end
        if limit is not None and limit - self.n_generated <= plan.answer_room(limit) + len(close):
            spent = True
        if not spent:
            return None
        self.forcing = list(close)
        return self.forcing[0]

    def track_thinking(self, token: int) -> None:
        """Follow the think block after `token` was accepted."""
        plan = self.plan
        if plan is None:
            return
        close = plan.close_tokens
        if self.forcing:
            if token == self.forcing[0]:
                self.forcing.pop(0)
            if not self.forcing:
                self.thinking, self.thought = False, True
            return
        if self.thinking and close and token == close[0]:
            self.thinking, self.thought = False, True
        elif not self.thinking and not self.thought and plan.think_open:
            n = len(plan.think_open)
            if tuple(self.tokens[-n:]) == plan.think_open and len(self.tokens) - n >= self.n_prompt:
                self.thinking = True

    def triggered(self, token: int) -> bool:
        plan = self.plan
        if plan is None or self.active:
            return False
        if token in plan.trigger_tokens:
            return True
        return plan.trigger_text is not None and self.text.text.endswith(plan.trigger_text)

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def n_generated(self) -> int:
        return len(self.tokens) - self.n_prompt

    @property
    def prefilling(self) -> bool:
        return self.n_past < self.n_prompt

    def finish_event(
        self, reason: FinishReason, message: str | None, n_extra: int, context_id: str | None
    ) -> FinishEvent:
        """The event that ends this request: usage (`n_extra` tokens sampled and billed but
        not kept), the text held back for stop strings, timings and counts in `extra`."""
        now = time.perf_counter()
        t_first = self.t_first or now
        spec = self.spec
        extra = {
            "prompt_ms": (t_first - self.t_admit) * 1000.0,
            "generate_ms": (now - t_first) * 1000.0,
            "queue_ms": (self.t_admit - self.handle.submitted) * 1000.0,
            "decode_ms": self.decode_seconds * 1000.0,
            "mask_steps": self.mask_steps,
            "mask_ms": self.mask_seconds * 1000.0,
            "context_id": context_id,
            "closed_early": self.closed_early,
            "draft_tokens": spec.drafted if spec is not None else 0,
            "draft_accepted_tokens": spec.accepted if spec is not None else 0,
        }
        tail = "" if reason == "abort" else self.text.flush()
        usage = Usage(self.n_prompt, self.n_generated + n_extra, self.n_cached)
        scores = None
        first = max(1, self.request.score_from)
        if self.request.prompt_logprobs is not None and len(self.prompt_scores) == self.n_prompt - first:
            scores = tuple(self.prompt_scores)
        return FinishEvent(reason, usage, tail, message, extra, scores)

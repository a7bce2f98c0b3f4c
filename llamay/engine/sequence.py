"""The engine's state for one running request (owned by the engine thread)."""

from __future__ import annotations

import time

import numpy as np

from ..grammar import CompileCache, Constraint, allocate_mask
from ..types import PromptLogprob, SamplingParams
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
        self.constraint: Constraint | None = None
        self.mask: np.ndarray | None = None
        self.ngram: NgramPenalty | None = None
        rep: RepetitionParams = req.repetition or RepetitionParams()
        has_grammar = self.plan is not None and self.plan.grammar is not None
        if has_grammar and rep.enabled and rep.multiplier > 0 and structural is not None:
            self.ngram = NgramPenalty(rep, structural, req.tokens)
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
        """The token to force now because the unconstrained budget ran out, if any."""
        plan = self.plan
        if plan is None or self.active or plan.budget is None or plan.budget_token is None:
            return None
        return plan.budget_token if self.n_generated >= plan.budget else None

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

"""The engine's state for one running request (owned by the engine thread)."""

from __future__ import annotations

import time

from ..types import SamplingParams
from .request import GenerateRequest, Handle, Sink
from .sampler import Sampler
from .textstream import TextStream

__all__ = ["Sequence"]


class Sequence:
    """A request bound to a llama sequence id. `tokens` holds prompt + sampled tokens;
    `n_past` of them are in the KV cache."""

    def __init__(self, handle: Handle, sink: Sink, seq_id: int, n_vocab: int, seed: int) -> None:
        req: GenerateRequest = handle.request
        self.handle = handle
        self.request = req
        self.sink = sink
        self.seq_id = seq_id
        self.tokens: list[int] = list(req.tokens)
        self.n_prompt = len(req.tokens)
        self.n_past = 0
        self.n_cached = 0
        params: SamplingParams = req.sampling
        self.sampler = Sampler(params, n_vocab, seed, req.tokens)
        self.text = TextStream(req.stop.stop)
        self.constraint = req.constraint
        self.t_admit = time.perf_counter()
        self.t_first: float | None = None
        self.done = False

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def n_generated(self) -> int:
        return len(self.tokens) - self.n_prompt

    @property
    def prefilling(self) -> bool:
        return self.n_past < self.n_prompt

"""The per-request part of an engine step: mask -> sample -> accept -> stop checks -> publish."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ..types import TokenEvent, TopLogprob
from .sequence import Sequence

if TYPE_CHECKING:
    from .engine import Engine

__all__ = ["sample_step"]


def sample_step(engine: Engine, s: Sequence, row: int) -> None:
    """Sample the next token of `s` from batch row `row` and publish it."""
    model = engine.model
    logits = engine.ctx.logits(row)
    mask = s.constraint.mask() if s.constraint is not None else None
    try:
        sample = s.sampler.sample(logits, mask)
    except ValueError as exc:  # nothing allowed: the constraint reached a dead end
        engine._finish(s, "error", f"no token can continue the required format: {exc}")
        return
    token = sample.token
    if s.t_first is None:
        s.t_first = time.perf_counter()
    spec = s.request.stop
    if token in model.eog_ids and not spec.ignore_eos:
        engine._finish(s, "stop", n_extra=1)
        return
    s.sampler.accept(token)
    s.tokens.append(token)
    if s.constraint is not None and not s.constraint.consume(token):
        engine._finish(s, "error", "the sampled token was rejected by the required format")
        return
    piece = model.piece(token)
    push = s.text.push(piece)
    top = tuple(TopLogprob(t, model.piece(t), lp) for t, lp in sample.top)
    engine._safe_sink(s.sink, TokenEvent(token, push.text, sample.logprob, top, piece))
    if push.stopped:
        engine._finish(s, "stop")
    elif spec.max_tokens is not None and s.n_generated >= spec.max_tokens:
        engine._finish(s, "length")
    elif s.n_tokens >= engine.n_ctx:
        engine._finish(s, "length", f"the context is full ({engine.n_ctx} tokens)")
    elif s.constraint is not None and s.constraint.is_stopped():
        engine._finish(s, "stop")

"""The per-request part of an engine step: mask -> sample -> accept -> stop checks -> publish."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ..types import FinishReason, TokenEvent, TopLogprob
from .repetition import PackedMask
from .sampler import Sample
from .sequence import Sequence

if TYPE_CHECKING:
    from .engine import Engine

__all__ = ["sample_step"]


def sample_step(engine: Engine, s: Sequence, row: int) -> None:
    """Sample the next token of `s` from batch row `row` and publish it."""
    model = engine.model
    if s.request.stop.max_tokens == 0:  # prefill only (creating a context, scoring a prompt)
        engine._finish(s, "length")  # the token budget, zero, is spent
        return
    sample = _sample(engine, s, row)
    if sample is None:
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
        engine._finish(s, "error", f"the output left the required format: {s.constraint.error}")
        return
    piece = model.piece(token)
    push = s.text.push(piece)
    if s.plan is not None and s.triggered(token):
        s.activate(model.compile_cache)
    top = tuple(TopLogprob(t, model.piece(t), lp) for t, lp in sample.top)
    engine._safe_sink(s.sink, TokenEvent(token, push.text, sample.logprob, top, piece))
    _check_end(engine, s, stopped=push.stopped)


def _sample(engine: Engine, s: Sequence, row: int) -> Sample | None:
    forced = s.budget_token()
    if forced is not None:
        return Sample(forced)
    logits = engine.ctx.logits(row)
    if s.constraint is None:
        return s.sampler.sample(logits)
    assert s.mask is not None
    t0 = time.perf_counter()
    s.constraint.fill_mask(s.mask)
    if s.ngram is not None:
        # The penalty only reweights: the mask still decides what may follow.
        plan = s.plan
        prefix = plan.trigger_text.encode() if plan is not None and plan.trigger_text else b""
        allowed = PackedMask(s.mask, engine.model.n_vocab)
        logits = s.ngram.penalize(logits, s.tokens[s.n_prompt :], engine.model.pieces, allowed, prefix)
    try:
        sample = s.sampler.sample(logits, s.mask)
    except ValueError as exc:  # the mask allows nothing the model can produce
        engine._finish(s, "error", f"no token can continue the required format: {exc}")
        return None
    s.mask_seconds += time.perf_counter() - t0
    s.mask_steps += 1
    return sample


def _check_end(engine: Engine, s: Sequence, *, stopped: bool) -> None:
    spec = s.request.stop
    inside = s.constraint is not None and not s.constraint.is_accepting()
    reason: FinishReason | None = None
    message = None
    if stopped:
        reason = "stop"
    elif spec.max_tokens is not None and s.n_generated >= spec.max_tokens:
        reason = "length"
        if inside:
            message = "max_tokens ended generation inside the required format; the output is incomplete"
    elif s.n_tokens >= engine.n_ctx:
        reason = "length"
        message = f"the context is full ({engine.n_ctx} tokens)"
        if inside:
            message += "; generation ended inside the required format, the output is incomplete"
    elif s.constraint is not None and s.constraint.is_stopped():
        reason = "stop"
    if reason is not None:
        engine._finish(s, reason, message)

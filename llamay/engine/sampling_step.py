"""The per-request part of an engine step: mask -> sample -> accept -> stop checks.

`sample_step` is a function of one sequence, its logits row and a few facts about the
model. It advances the sequence's own state (sampler, tokens, constraint, text stream)
and returns an `Outcome`: what to publish and whether the request ends. Publishing and
finishing (settling the KV, usage, the FinishEvent) are the engine's to do.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..grammar import CompileCache
from ..grammar.runtime import forbid
from ..types import FinishReason, TokenEvent, TopLogprob
from .packed_mask import PackedMask
from .sampler import Sample
from .sequence import Sequence

__all__ = ["Finish", "Outcome", "StepModel", "sample_step", "CLOSED_EARLY"]

CLOSED_EARLY = "max_tokens was nearly spent: the answer was closed early with the shortest valid ending"
# Near the end of max_tokens (within twice the shortest completion, plus this), every
# sampled token is checked to leave room for one; before that the room is re-measured
# every ROOM_EVERY tokens.
ROOM_SLACK = 16
ROOM_EVERY = 16


class StepModel(Protocol):
    """What a sampling step needs to know about the model."""

    @property
    def n_vocab(self) -> int: ...

    @property
    def eog_ids(self) -> frozenset[int]: ...

    @property
    def pieces(self) -> list[bytes]: ...  # the bytes of every token id

    @property
    def compile_cache(self) -> CompileCache: ...  # read only when a lazy constraint triggers


@dataclass(frozen=True)
class Finish:
    """The request ends with `reason` (and `message` when the reason is not plain).
    `n_extra` counts a sampled token that ended it without being kept (end of generation),
    so usage still bills it."""

    reason: FinishReason
    message: str | None = None
    n_extra: int = 0


@dataclass(frozen=True)
class Outcome:
    """What one step produced: the engine publishes `token` (if any) first, then applies
    `finish` (if any)."""

    token: TokenEvent | None = None
    finish: Finish | None = None


def sample_step(s: Sequence, logits: np.ndarray, model: StepModel, n_ctx: int) -> Outcome:
    """Sample the next token of `s` from `logits` (its row of the last decode), advance
    `s` past it and say what to publish. Never touches the KV cache or the sink; `s.done`
    stays for the engine to set when it applies a finish."""
    if s.request.stop.max_tokens == 0:  # prefill only (creating a context, scoring a prompt)
        return Outcome(finish=Finish("length"))  # the token budget, zero, is spent
    sample = _sample(s, logits, model)
    if isinstance(sample, Finish):
        return Outcome(finish=sample)
    token = sample.token
    if s.t_first is None:
        s.t_first = time.perf_counter()
    spec = s.request.stop
    if token in model.eog_ids and not spec.ignore_eos:
        return Outcome(finish=Finish("stop", n_extra=1))
    s.sampler.accept(token)
    s.tokens.append(token)
    s.track_thinking(token)
    if s.constraint is not None and not s.constraint.consume(token):
        return Outcome(finish=Finish("error", f"the output left the required format: {s.constraint.error}"))
    pieces = model.pieces
    piece = pieces[token]
    push = s.text.push(piece)
    if s.plan is not None and s.triggered(token):
        s.activate(model.compile_cache)
    top = tuple(TopLogprob(t, pieces[t], lp) for t, lp in sample.top)
    event = TokenEvent(token, push.text, sample.logprob, top, piece)
    return Outcome(event, _check_end(s, n_ctx, stopped=push.stopped))


def _sample(s: Sequence, logits: np.ndarray, model: StepModel) -> Sample | Finish:
    forced = s.budget_token()
    if forced is not None:
        return Sample(forced)
    if s.closing:
        return Sample(s.closing.pop(0))
    if s.constraint is None:
        return s.sampler.sample(logits)
    assert s.mask is not None
    t0 = time.perf_counter()
    s.constraint.fill_mask(s.mask)
    if s.ngram is not None:
        # The penalty only reweights: the mask still decides what may follow.
        plan = s.plan
        prefix = plan.trigger_text.encode() if plan is not None and plan.trigger_text else b""
        allowed = PackedMask(s.mask, model.n_vocab)
        logits = s.ngram.penalize(logits, s.tokens[s.n_prompt :], model.pieces, allowed, prefix)
    try:
        sample = s.sampler.sample(logits, s.mask)
    except ValueError as exc:  # the mask allows nothing the model can produce
        return Finish("error", f"no token can continue the required format: {exc}")
    sample = _in_layout(s, logits, sample)
    fitted = _fit(s, sample, model.eog_ids)
    s.mask_seconds += time.perf_counter() - t0
    s.mask_steps += 1
    return fitted


# Samples drawn again, each without the token before, for one that keeps the layout.
LAYOUT_TRIES = 16


def _in_layout(s: Sequence, logits: np.ndarray, sample: Sample) -> Sample:
    """`sample`, or when its token leaves the canonical layout (layout.py) the best token
    that keeps it: the refused token's bit is cleared from the mask and sampling runs
    again. After LAYOUT_TRIES refusals (a model that ranks many stray whitespace tokens
    first) every allowed token is checked once and the mask keeps only those in the
    layout; if none is, the grammar's own choice stands (still valid JSON)."""
    c = s.constraint
    assert c is not None and s.mask is not None
    limit = s.request.stop.max_tokens
    for _ in range(LAYOUT_TRIES):
        if c.keeps_layout(sample.token):
            return sample
        t = sample.token
        # What the model chose, written in the layout's whitespace: its tail is forced in
        # the next steps. Not near max_tokens, where the shortest endings decide (_fit).
        tokens = c.respaced(t)
        if tokens and (limit is None or not _in_reach(s, limit - s.n_generated - len(tokens))):
            s.closing = tokens[1:]
            return Sample(tokens[0])
        forbid(s.mask, t)
        try:
            sample = s.sampler.sample(logits, s.mask)
        except ValueError:  # nothing else allowed: keep what the grammar took
            return Sample(t)
    if c.keeps_layout(sample.token):
        return sample
    before = s.mask.copy()
    if c.keep_layout(s.mask) == 0:
        s.mask[:] = before
        return sample
    try:
        return s.sampler.sample(logits, s.mask)
    except ValueError:  # the sampler's own filters left nothing of what stays
        return sample


def _fit(s: Sequence, sample: Sample, eog: frozenset[int]) -> Sample | Finish:
    """`sample`, unless taking it would leave too few tokens under max_tokens to finish a
    valid answer: then the first token of a valid ending that fits (the rest are forced in
    the next steps), or the end when the answer is complete already.

    Once near the end every token is checked, but the constraint keeps the last ending it
    found and most tokens only need that one checked again (`Constraint.ending_after`);
    whenever a token is taken, an ending that fits after it is known, so the answer can
    always still be closed."""
    c = s.constraint
    limit = s.request.stop.max_tokens
    if c is None or limit is None or sample.token in eog:
        return sample
    left = limit - s.n_generated  # this token included
    if not _near_end(s, left):
        return sample
    after = c.ending_after(sample.token, left - 1)
    if after is not None:
        s.room, s.room_at = len(after), s.n_generated + 1  # measured after this token
        return sample
    now = c.ending(left)
    if now is None:  # no valid ending fits any more: the answer may end incomplete
        return sample
    s.closed_early = True
    if not now:
        return Finish("stop", CLOSED_EARLY)
    s.closing = now[1:]
    return Sample(now[0])


def _near_end(s: Sequence, left: int) -> bool:
    assert s.constraint is not None
    if s.room_at < 0 or s.n_generated - s.room_at >= ROOM_EVERY:
        found = s.constraint.ending(left)
        # None: no ending fits in what is left, so there is nothing to steer to (looked
        # for again ROOM_EVERY tokens on, in case the model closed something itself).
        s.room, s.room_at = (-1 if found is None else len(found)), s.n_generated
    return s.room >= 0 and _in_reach(s, left)


def _in_reach(s: Sequence, left: int) -> bool:
    """Whether `left` tokens are within reach of the shortest ending as last measured."""
    return left <= 2 * max(s.room, 0) + ROOM_SLACK


def _check_end(s: Sequence, n_ctx: int, *, stopped: bool) -> Finish | None:
    spec = s.request.stop
    inside = s.constraint is not None and not s.constraint.is_accepting()
    if s.closed_early and not s.closing and not inside:
        return Finish("stop", CLOSED_EARLY)
    if stopped:
        return Finish("stop")
    if spec.max_tokens is not None and s.n_generated >= spec.max_tokens:
        said = []
        if spec.asked is not None:
            said.append(
                f"the context is full ({n_ctx} tokens): max_tokens {spec.asked} was cut to "
                f"{spec.max_tokens}, the room the prompt left"
            )
        if inside:
            said.append("max_tokens ended generation inside the required format; the output is incomplete")
        return Finish("length", "; ".join(said) or None)
    if s.n_tokens >= n_ctx:
        message = f"the context is full ({n_ctx} tokens)"
        if inside:
            message += "; generation ended inside the required format, the output is incomplete"
        return Finish("length", message)
    if s.constraint is not None and s.constraint.is_stopped():
        return Finish("stop")
    return None

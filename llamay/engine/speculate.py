"""Speculative decoding that never changes a token.

A decoding sequence may feed, after its last sampled token, k guessed ones (drafts) in the
same step: the step computes logits at every one of those positions. The rows are then
sampled in order by the same `sample_step` plain decoding uses, as if each had come from
a step of its own: row 0 samples the next token; while that token equals the draft that
was fed after it, the next row (computed from exactly that context) samples the one after.
The first mismatch, a finish, or the last row ends it; the KV of drafts that were not
taken is removed. Since llamay's arithmetic gives a position the same logits whatever
else its step holds (native/; checked by tests/model/invariance.py), and since sampler,
grammar, stop strings and budgets only ever see accepted tokens, in order, the output is
bitwise that of decoding without speculation: drafts change how many steps it takes,
never what comes out.

Drafts come from (`draft`):
- tokens the sequence will take whatever the logits say: the rest of a forced closing or
  a thinking-budget marker, and tokens the grammar forces (a fixed key, a closing bracket);
- prompt lookup: the tokens that followed the latest earlier occurrence of the last few
  tokens, in the prompt or the output so far (`Lookup`);
- a draft model sharing the target's tokenizer (engine/draft_model.py), when one is loaded.

How many (`Budget.depth`): a drafted position is worth computing when the chance it is
taken (the sequence's acceptance rate to the power of its depth) times what a token costs
in a plain step exceeds what one more row costs: so single streams draft deep, a full
batch drafts little or nothing, and a sequence whose guesses keep failing stops (probing
again now and then). Forced tokens are always taken and always drafted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .draft_model import DraftModel, DraftTask
from .sampling_step import Outcome, StepModel, sample_step
from .sequence import Sequence

__all__ = ["Budget", "CostFit", "Lookup", "SpecConfig", "SpecState", "Speculator", "depth", "verify"]


@dataclass(frozen=True)
class SpecConfig:
    """`enabled`: speculate at all. `max_draft`: drafts per sequence and step at most.
    `ngram`: the longest and shortest suffix prompt lookup matches."""

    enabled: bool = True
    max_draft: int = 8
    ngram_max: int = 3
    ngram_min: int = 2


class Lookup:
    """Prompt lookup over one sequence's tokens: for each n-gram (n in ngram_min..ngram_max)
    the position after its latest occurrence, indexed as tokens arrive (O(1) a token)."""

    def __init__(self, n_min: int, n_max: int) -> None:
        self.n_min, self.n_max = n_min, n_max
        self._index: list[dict[tuple[int, ...], int]] = [{} for _ in range(n_max + 1)]
        self._done = 0  # n-grams ending before this position are indexed

    def propose(self, tokens: list[int], k: int) -> list[int]:
        """Up to `k` tokens that followed the latest earlier occurrence of the longest
        matching suffix of `tokens` (nothing when no suffix of ngram_min tokens recurs)."""
        end = len(tokens)
        for e in range(max(self._done, self.n_min), end):
            for n in range(self.n_min, min(self.n_max, e) + 1):
                self._index[n][tuple(tokens[e - n : e])] = e
        self._done = max(self._done, end)
        if k <= 0:
            return []
        for n in range(min(self.n_max, end - 1), self.n_min - 1, -1):
            at = self._index[n].get(tuple(tokens[end - n :]))
            if at is not None and at < end:
                return tokens[at : min(at + k, end)]
        return []


@dataclass
class SpecState:
    """One sequence's speculation: its lookup index and how its guesses fared (an
    exponential average of the share of drafted positions taken, from a neutral start)."""

    lookup: Lookup
    rate: float = 0.5
    idle: int = 0  # steps since it last drafted from a guess (not forced tokens)
    drafted: int = 0
    accepted: int = 0

    def record(self, guessed: int, taken: int) -> None:
        """`taken` of the `guessed` drafts (forced ones not counted) were accepted."""
        if guessed <= 0:
            return
        # Each drafted position is one observation, the first weighted most: a guess that
        # failed at depth 1 says more than one that failed at depth 6.
        hit = taken / guessed if taken < guessed else 1.0
        self.rate += 0.3 * (hit - self.rate)


@dataclass
class CostFit:
    """A step's time as fixed + rows * per_row, fitted by exponentially weighted least
    squares over steps of at most MAX_ROWS rows (decoding steps, with or without drafts)."""

    decay: float = 0.98
    sums: list[float] = field(default_factory=lambda: [0.0] * 5)  # w, wn, wt, wnn, wnt
    MAX_ROWS = 48

    def add(self, rows: int, seconds: float) -> None:
        if rows > self.MAX_ROWS:
            return
        d = self.decay
        w, wn, wt, wnn, wnt = self.sums
        self.sums = [
            d * w + 1,
            d * wn + rows,
            d * wt + seconds,
            d * wnn + rows * rows,
            d * wnt + rows * seconds,
        ]

    def costs(self) -> tuple[float, float] | None:
        """(fixed, per_row) seconds, or None until steps of several sizes were seen."""
        w, wn, wt, wnn, wnt = self.sums
        if w < 4:
            return None
        var = wnn / w - (wn / w) ** 2
        if var < 0.25:  # every step was about the same size: no slope to read
            return None
        per_row = (wnt / w - (wn / w) * (wt / w)) / var
        fixed = wt / w - per_row * (wn / w)
        if per_row <= 0 or fixed <= 0:
            return None
        return fixed, per_row


# Before the fit knows better: a row costs this share of a one-row step (a small model on a
# CPU reads its weights once a step; each row adds its own arithmetic).
PRIOR_ROW_SHARE = 0.12
PROBE_EVERY = 16  # steps without drafting after which a failing sequence guesses once more


@dataclass(frozen=True)
class Budget:
    """What drafting may spend this step: `rows` in all, given `decoding` sequences
    decoding and the step's measured costs."""

    rows: int
    decoding: int
    costs: tuple[float, float] | None

    def depth(self, rate: float, limit: int, extra: float = 0.0) -> int:
        """How many guessed drafts pay at acceptance `rate`: depth i while rate**i times a
        token's cost in a plain step exceeds one row's cost (plus `extra` seconds, what
        making the guess costs, when the costs are known)."""
        if self.costs is None:
            fixed, per_row = 1.0, PRIOR_ROW_SHARE
        else:
            fixed, per_row = self.costs
            per_row += extra
        token = fixed / max(1, self.decoding) + per_row
        ratio = per_row / token
        k, p = 0, 1.0
        while k < limit:
            p *= rate
            if p <= ratio:
                break
            k += 1
        return k


def depth(state: SpecState, budget: Budget, limit: int, extra: float = 0.0) -> int:
    """Guessed drafts worth feeding (see Budget.depth, `extra` seconds per guess made); a
    sequence that stopped guessing guesses one again every PROBE_EVERY steps, so a change in
    its output (a passage to copy begins) is noticed."""
    k = budget.depth(state.rate, limit, extra)
    if k > 0:
        state.idle = 0
        return k
    state.idle += 1
    if state.idle >= PROBE_EVERY:
        state.idle = 0
        return min(1, limit)
    return 0


def _forced(s: Sequence) -> list[int]:
    """Tokens `s` takes next whatever the logits: a forced closing or thinking marker under
    way, else what the grammar forces (when no budget or closing can intervene)."""
    if s.forcing:
        return list(s.forcing)
    if s.closing:
        return list(s.closing)
    c = s.constraint
    if c is None or s.thinking:
        return []
    return c.forced_tokens()


def verify(
    s: Sequence, rows: list[np.ndarray], drafts: list[int], model: StepModel, n_ctx: int
) -> tuple[list[Outcome], int]:
    """Sample `s` from `rows` (row 0: after its last token; row i: after drafts[i - 1]) in
    order, as plain decoding would sample them one step at a time. Returns the outcomes to
    apply, in order, and how many rows' inputs were kept (1 + the drafts taken): the KV
    past those is stale."""
    outcomes: list[Outcome] = []
    for i, logits in enumerate(rows):
        out = sample_step(s, logits, model, n_ctx)
        outcomes.append(out)
        if out.finish is not None or out.token is None or i == len(drafts):
            return outcomes, i + 1
        if s.tokens[-1] != drafts[i]:
            return outcomes, i + 1
    return outcomes, len(rows)


class Speculator:
    """The engine's speculation across sequences: which drafts each decoding sequence feeds
    this step (`plan`), and the counts after verification (`taken`). Engine thread only.
    `drafter`: a draft model (engine/draft_model.py) guessing where prompt lookup has none."""

    def __init__(self, config: SpecConfig, drafter: DraftModel | None = None) -> None:
        self.config = config
        self.drafter = drafter
        self.fit = CostFit()
        self.drafted = 0  # drafted positions fed, forced ones included
        self.accepted = 0  # of those, taken

    def plan(
        self, seqs: list[Sequence], decoding: list[int], room: int, n_ctx: int
    ) -> dict[int, tuple[list[int], int]]:
        """Drafts for the sequences at `decoding` (indices into `seqs`, each feeding one
        token this step), within `room` extra rows and the context's `n_ctx` positions:
        index -> (drafts, guessed)."""
        out: dict[int, tuple[list[int], int]] = {}
        if not self.config.enabled or not decoding:
            return out
        budget = Budget(room, len(decoding), self.fit.costs())
        asks: list[tuple[int, DraftTask]] = []
        for i in decoding:
            s = seqs[i]
            if s.spec is None:
                s.spec = SpecState(Lookup(self.config.ngram_min, self.config.ngram_max))
            limit = min(room, self.config.max_draft, _left(s), n_ctx - s.n_tokens)
            if limit <= 0:
                s.spec.lookup.propose(s.tokens, 0)  # keep its index current
                continue
            forced = _forced(s)[:limit]
            if forced:
                out[i] = (forced, 0)
                room -= len(forced)
                continue
            guesses = s.spec.lookup.propose(s.tokens, depth(s.spec, budget, limit))
            if guesses:
                out[i] = (guesses, len(guesses))
                room -= len(guesses)
            elif self.drafter is not None and s.spec.idle == 0:
                k = budget.depth(s.spec.rate, limit, self.drafter.per_token or 0.0)
                if k:
                    asks.append((i, DraftTask(s.seq_id, s.request.id, s.tokens, k)))
                    room -= k
        if asks:
            assert self.drafter is not None
            self.drafter.guess([task for _, task in asks])
            for i, task in asks:
                if task.out:
                    out[i] = (task.out, len(task.out))
        return out

    def taken(self, s: Sequence, drafts: list[int], guessed: int, kept: int) -> None:
        """`kept` - 1 of `drafts` (the first len(drafts) - guessed of them forced) were taken."""
        took = kept - 1
        self.drafted += len(drafts)
        self.accepted += took
        forced = len(drafts) - guessed
        assert s.spec is not None
        s.spec.drafted += len(drafts)
        s.spec.accepted += took
        s.spec.record(guessed, max(0, took - forced))

    def retain(self, running: set[int]) -> None:
        """Only the sequence ids in `running` are in use: a draft model forgets the rest."""
        if self.drafter is not None:
            self.drafter.retain(running)


def _left(s: Sequence) -> int:
    """Drafts that can still matter: row i samples generated token n_generated + i + 1,
    which max_tokens may forbid."""
    limit = s.request.stop.max_tokens
    return 1 << 30 if limit is None else max(0, limit - s.n_generated - 1)

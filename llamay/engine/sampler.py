"""Per-request token sampler over numpy logits (one `sample()` call per generated token).

Order of operations, each step seeing the output of the one before:

1. `logit_bias`: added to the raw logits (-inf bans a token, +inf forces the +inf tokens).
2. Penalties over the last `repeat_last_n` tokens (prompt tokens first, then every token
   passed to `accept()`), llama.cpp style: `repeat_penalty` divides positive logits and
   multiplies non-positive ones, then `count * frequency_penalty + presence_penalty` is
   subtracted.
3. `mask` (llguidance packed bitmask): disallowed tokens leave the candidate set.
4. Log-probabilities (only when `logprobs` or `top_logprobs > 0`): log-softmax at
   temperature 1 of the distribution produced by steps 1-3.
5. Greedy (`temperature <= 0`): argmax, ties to the lowest token id. Otherwise the filters
   `top_k` -> `typical_p` -> `top_p` -> `min_p`, each renormalising over the candidates the
   previous one left (as llama.cpp does), then `temperature`, then one draw.

Determinism: each Sampler owns `Generator(PCG64(seed))` and takes exactly one uniform
draw per non-greedy token, and the draw walks the final candidates in token-id order, so
the same seed and logits give the same tokens regardless of other requests or of which
internal path (partition or full sort) computed the candidate set. Ties in every ranking
(top_k, top_p, typical_p, top_logprobs) go to the lowest token id.

Cost: the input logits are never written; plain greedy reads them without copying. Penalties
touch only the ids in the window; top_k uses `np.argpartition`; top_p and typical_p rank
only the best 1024 (then 8192) candidates and fall back to a full sort when those hold too
little mass, which keeps the result exact. The draw sums weights in blocks instead of a
float64 cumulative sum over the whole vocabulary.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ..types import SamplingParams

__all__ = ["Sample", "Sampler", "PARTITION_SIZES"]

PARTITION_SIZES: tuple[int, ...] = (1024, 8192)
"""Candidate counts top_p/typical_p try (via argpartition) before a full sort."""

_BLOCK = 256  # block size of the two-level inverse-CDF draw

_NEG_INF = np.float32(-np.inf)


@dataclass(frozen=True)
class Sample:
    """One sampled token. `logprob` is set when `params.logprobs` or `params.top_logprobs`
    asks for it; `top` holds `min(top_logprobs, n_vocab)` (token, logprob) pairs, best
    first (disallowed tokens may appear at -inf when fewer tokens are allowed)."""

    token: int
    logprob: float | None = None
    top: tuple[tuple[int, float], ...] = ()


class Sampler:
    """Samples one request's tokens. Not thread-safe; one instance per request.

    `seed` is the resolved seed (negative seeds are taken modulo 2**64). `prompt_tokens`
    pre-fill the penalty window. Raises ValueError for a logit_bias id outside the vocab.
    """

    def __init__(
        self, params: SamplingParams, n_vocab: int, seed: int, prompt_tokens: Sequence[int] = ()
    ) -> None:
        if n_vocab <= 0:
            raise ValueError(f"n_vocab must be positive (got {n_vocab})")
        self.params = params
        self.n_vocab = n_vocab
        self._rng = np.random.Generator(np.random.PCG64(seed % 2**64))
        self._all_ids = np.arange(n_vocab, dtype=np.intp)
        self._all_ids.setflags(write=False)
        # Reused vocabulary-sized buffers (adjusted logits; exp weights): fresh large
        # temporaries on every token cost page faults, which are slow in VMs.
        self._scratch = np.empty(n_vocab, dtype=np.float32)
        self._work = np.empty(n_vocab, dtype=np.float32)
        self._blocked = np.empty(n_vocab, dtype=bool)
        bias: dict[int, float] = {}
        for token, value in params.logit_bias:
            if not 0 <= token < n_vocab:
                raise ValueError(f"logit_bias token {token} is outside the vocabulary")
            bias[token] = bias.get(token, 0.0) + value
        self._bias_ids = np.fromiter(bias.keys(), dtype=np.intp, count=len(bias))
        self._bias_vals = np.fromiter(bias.values(), dtype=np.float32, count=len(bias))
        self._bias_forces = bool(np.isposinf(self._bias_vals).any())
        self._penalize = params.repeat_last_n > 0 and (
            params.repeat_penalty != 1.0 or params.presence_penalty != 0.0 or params.frequency_penalty != 0.0
        )
        # Only kept when penalties are on: accept() is then a deque append, else a no-op.
        self._window: deque[int] = deque(maxlen=max(params.repeat_last_n, 1))
        if self._penalize:
            self._window.extend(prompt_tokens[-params.repeat_last_n :])
        self._want_logprobs = params.logprobs or params.top_logprobs > 0

    def accept(self, token: int) -> None:
        """Record an emitted token in the penalty window."""
        if self._penalize:
            self._window.append(token)

    def sample(self, logits: np.ndarray, mask: np.ndarray | None = None) -> Sample:
        """Pick the next token from `logits` (1-D, length >= n_vocab, never modified).

        `mask` is a packed int32/uint32 bitmask of (n_vocab+31)//32 words (bit i%32 of word
        i//32 set = token i allowed). Raises ValueError when no token can be chosen (the
        mask allows nothing, or everything allowed is banned) or the inputs are malformed.
        Does not call `accept()`: the caller does, once the token is really emitted.
        """
        ids, vals = self._candidates(logits, mask)
        top_val = vals.max()
        if not top_val > -np.inf:
            raise ValueError("no token can be sampled: every allowed logit is -inf (or one is NaN)")
        lse = self._logsumexp(vals, float(top_val)) if self._want_logprobs else 0.0
        p = self.params
        if p.greedy:
            pos = int(np.argmax(vals))  # ids ascending: first max is the lowest id
            token = int(ids[pos])
        else:
            token = self._draw(ids, vals)
        if not self._want_logprobs:
            return Sample(token)
        logprob = float(vals[np.searchsorted(ids, token)]) - lse
        return Sample(token, logprob, self._top(ids, vals, lse))

    # -- steps 1-3 ----------------------------------------------------------------------

    def _candidates(self, logits: np.ndarray, mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Apply bias, penalties and mask. Returns (candidate ids ascending, their values);
        masked-out tokens are either absent or present at -inf."""
        n = self.n_vocab
        if logits.ndim != 1 or len(logits) < n:
            raise ValueError(f"logits must be 1-D with at least {n} entries (got shape {logits.shape})")
        x = logits[:n]  # a view: copied below only when something changes it
        if len(self._bias_ids) or (self._penalize and self._window) or x.dtype != np.float32:
            x = self._scratch
            np.copyto(x, logits[:n], casting="same_kind")
            x[self._bias_ids] += self._bias_vals
            if self._penalize and self._window:
                self._apply_penalties(x)
            if self._bias_forces and np.isposinf(x).any():
                # A +inf bias means "must pick one of these": uniform over them.
                x = np.where(np.isposinf(x), np.float32(0.0), _NEG_INF)
        if mask is None:
            return self._all_ids, x
        allowed = self._unpack(mask)
        n_allowed = int(np.count_nonzero(allowed))
        if n_allowed == 0:
            raise ValueError("the mask allows no token")
        if n_allowed * 4 < n:
            # Sparse (typical mid-grammar): every later step then works on a small array.
            ids = np.flatnonzero(allowed)
            return ids, x[ids]
        # Dense: overwrite the blocked logits with -inf in the reused buffer; gathering
        # would allocate two vocabulary-sized arrays per token.
        if x is not self._scratch:
            np.copyto(self._scratch, x)
            x = self._scratch
        np.logical_not(allowed, out=self._blocked)
        np.putmask(x, self._blocked, _NEG_INF)
        return self._all_ids, x

    def _apply_penalties(self, x: np.ndarray) -> None:
        p = self.params
        window = np.fromiter(self._window, dtype=np.intp, count=len(self._window))
        toks, counts = np.unique(window, return_counts=True)
        inside = (toks >= 0) & (toks < self.n_vocab)
        toks, counts = toks[inside], counts[inside]
        v = x[toks]
        if p.repeat_penalty != 1.0:
            v = np.where(v <= 0, v * p.repeat_penalty, v / p.repeat_penalty)
        x[toks] = v - (counts * p.frequency_penalty + p.presence_penalty)

    def _unpack(self, mask: np.ndarray) -> np.ndarray:
        words = (self.n_vocab + 31) // 32
        if mask.ndim != 1 or mask.dtype.kind not in "iu" or mask.dtype.itemsize != 4:
            raise ValueError(f"mask must be a 1-D int32/uint32 array (got {mask.dtype}, shape {mask.shape})")
        if len(mask) < words:
            raise ValueError(f"mask has {len(mask)} words, {words} needed for {self.n_vocab} tokens")
        # Little-endian words viewed as bytes put token i at bit i%8 of byte i//8.
        raw = np.ascontiguousarray(mask[:words]).astype("<u4", copy=False).view(np.uint8)
        return np.unpackbits(raw, count=self.n_vocab, bitorder="little").view(bool)

    # -- step 4 -------------------------------------------------------------------------

    def _logsumexp(self, vals: np.ndarray, top_val: float) -> float:
        # float32 exp is SIMD-fast on the full vocab; accumulate in float64 for accuracy.
        weights = self._exp_shifted(vals, 1.0, top_val)
        return top_val + math.log(float(weights.sum(dtype=np.float64)))

    def _exp_shifted(self, vals: np.ndarray, temperature: float, top: float | None = None) -> np.ndarray:
        """exp((vals - max) / temperature) as float32, in the reused work buffer (valid
        until the next call). Every weight is <= 1 and the largest is exactly 1."""
        out = self._work[: len(vals)]
        np.subtract(vals, vals.max() if top is None else np.float32(top), out=out)
        if temperature != 1.0:
            out /= np.float32(temperature)
        return np.exp(out, out=out)

    def _top(self, ids: np.ndarray, vals: np.ndarray, lse: float) -> tuple[tuple[int, float], ...]:
        want = min(self.params.top_logprobs, self.n_vocab)
        if want == 0:
            return ()
        if want > len(vals):
            # Fewer allowed tokens than requested: pad with disallowed ones at -inf.
            full = np.full(self.n_vocab, _NEG_INF, dtype=np.float32)
            full[ids] = vals
            ids, vals = self._all_ids, full
        sel = _top_positions(vals, want) if want < len(vals) else np.arange(len(vals))
        sel = _rank(-vals[sel], sel)
        return tuple((int(t), float(v) - lse) for t, v in zip(ids[sel], vals[sel], strict=True))

    # -- step 5 -------------------------------------------------------------------------

    def _draw(self, ids: np.ndarray, vals: np.ndarray) -> int:
        """Filters, temperature and the one draw. Every step keeps `ids` ascending."""
        p = self.params
        if 0 < p.top_k < len(vals):
            keep = np.sort(_top_positions(vals, p.top_k))
            ids, vals = ids[keep], vals[keep]
        if p.typical_p < 1.0:
            ids, vals = self._typical(ids, vals)
        if p.top_p < 1.0:
            weights = self._exp_shifted(vals, 1.0)
            keep = np.sort(_mass_prefix(vals, weights, p.top_p, strict=False))
            ids, vals = ids[keep], vals[keep]
        if p.min_p > 0.0:
            # p_i >= min_p * p_max  <=>  logit_i >= logit_max + log(min_p)
            keep = np.flatnonzero(vals >= vals.max() + math.log(p.min_p))
            ids, vals = ids[keep], vals[keep]
        u = self._rng.random()  # the one draw for this token, whatever the filters left
        # Every weight is <= 1 and the maximum is exactly 1; -inf logits weigh 0 and are
        # never picked, so banned tokens need no separate filtering.
        weights = self._exp_shifted(vals, p.temperature)
        return int(ids[_pick(weights, u)])

    def _typical(self, ids: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Locally typical sampling (llama.cpp's rule): rank by |surprise - entropy| and
        keep the best-ranked tokens until their mass exceeds typical_p."""
        finite = vals > -np.inf
        if not finite.all():  # 0 * -inf would poison the entropy
            ids, vals = ids[finite], vals[finite]
        logp = vals - np.float32(self._logsumexp(vals, float(vals.max())))
        prob = np.exp(logp)
        entropy = -float(np.dot(prob.astype(np.float64), logp.astype(np.float64)))
        score = -np.abs(-logp - np.float32(entropy))  # higher = more typical
        keep = np.sort(_mass_prefix(score, prob, self.params.typical_p, strict=True))
        return ids[keep], vals[keep]


def _top_positions(vals: np.ndarray, k: int) -> np.ndarray:
    """Positions of the k largest `vals` (unordered), ties at the cut going to the lowest
    position (= lowest token id, since candidate ids are kept ascending). 0 < k < len."""
    sel = np.argpartition(vals, len(vals) - k)[len(vals) - k :]
    kth = vals[sel].min()
    # argpartition breaks ties arbitrarily; repair the boundary so the set is well defined.
    above = sel[vals[sel] > kth]
    ties = np.flatnonzero(vals == kth)
    if len(ties) > k - len(above):
        sel = np.concatenate((above, ties[: k - len(above)]))
    return sel


def _rank(key: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """`positions` ordered by ascending float32 `key` (`key[i]` belongs to `positions[i]`),
    ties by ascending position.

    One unstable uint64 sort of (order-preserving key bits << 32 | position): the pairs are
    unique, so the result is the stable order, and it is several times faster than numpy's
    stable argsort on a full vocabulary.
    """
    bits = (key + np.float32(0.0)).view(np.int32)  # + 0.0 folds -0.0 into 0.0
    # Negative floats: flip all bits; non-negative: set the sign bit. Unsigned order then
    # equals float order (IEEE 754 totally ordered bit trick).
    flip = (bits >> 31).view(np.uint32) | np.uint32(0x80000000)
    pairs = (bits.view(np.uint32) ^ flip).astype(np.uint64)
    pairs <<= np.uint64(32)
    pairs |= positions.astype(np.uint64)
    pairs.sort()
    return (pairs & np.uint64(0xFFFFFFFF)).astype(np.intp)


def _mass_prefix(score: np.ndarray, weights: np.ndarray, fraction: float, *, strict: bool) -> np.ndarray:
    """The shortest run of positions in descending-`score` order (ties by position) whose
    weight reaches (`strict`: exceeds) `fraction` of the total; all positions if none does.

    Tries the PARTITION_SIZES best scores first and sorts only those; the answer is
    accepted only when the cut's score is strictly above the partition's lowest score, so
    every position that ranks at or before the cut is inside it and the result equals
    that of a full sort exactly (same elements, same order, same float sums).
    """
    n = len(score)
    target = fraction * float(weights.sum(dtype=np.float64))
    side: Literal["left", "right"] = "right" if strict else "left"
    for size in PARTITION_SIZES:
        if size >= n:
            break
        part = np.argpartition(score, n - size)[n - size :]
        sel = _rank(-score[part], part)
        cut = int(np.searchsorted(np.cumsum(weights[sel], dtype=np.float64), target, side=side))
        if cut < size and score[sel[cut]] > score[sel[-1]]:
            return sel[: cut + 1]
    order = _rank(-score, np.arange(n))
    cut = int(np.searchsorted(np.cumsum(weights[order], dtype=np.float64), target, side=side))
    return order[: cut + 1]


def _pick(weights: np.ndarray, u: float) -> int:
    """Index i with probability weights[i] / sum, by inverting the CDF (index order) at u.

    Two levels, so a full-vocabulary draw costs one blocked sum rather than a float64
    cumulative sum of every weight: find the block by its running total, then the index
    inside it. Zero weights are never returned.
    """
    n = len(weights)
    full = n // _BLOCK
    sums = weights[: full * _BLOCK].reshape(full, _BLOCK).sum(axis=1, dtype=np.float64)
    if n % _BLOCK:
        sums = np.append(sums, weights[full * _BLOCK :].sum(dtype=np.float64))
    block_cdf = np.cumsum(sums)
    target = u * float(block_cdf[-1])
    b = int(np.searchsorted(block_cdf, target, side="right"))
    if b >= len(block_cdf):  # u * total rounded up to total: last block with weight
        b = int(np.searchsorted(block_cdf, block_cdf[-1], side="left"))
    block = weights[b * _BLOCK : (b + 1) * _BLOCK]
    base = float(block_cdf[b - 1]) if b else 0.0
    i = int(np.searchsorted(base + np.cumsum(block, dtype=np.float64), target, side="right"))
    if i >= len(block):  # rounding between the block sum and its running sum
        i = int(np.flatnonzero(block)[-1])
    return b * _BLOCK + i

"""Per-request token sampler over numpy logits (one `sample()` call per generated token).

Order of operations, each step seeing the output of the one before:

1. `logit_bias`: added to the raw logits (-inf bans a token, +inf forces the +inf tokens).
2. Penalties over the last `repeat_last_n` tokens (prompt tokens first, then every token
   passed to `accept()`), llama.cpp style: `repeat_penalty` divides positive logits and
   multiplies non-positive ones, then `count * frequency_penalty + presence_penalty` is
   subtracted; then the DRY penalty over its own window.
3. `mask` (llguidance packed bitmask): disallowed tokens leave the candidate set.
4. Log-probabilities (only when `logprobs` or `top_logprobs > 0`): log-softmax at
   temperature 1 of the distribution produced by steps 1-3.
5. Greedy (`temperature <= 0`): argmax, ties to the lowest token id. Otherwise the filters
   `top_k` -> `tfs_z` -> `typical_p` -> `top_p` -> `min_p` -> XTC, each renormalising over
   the candidates the previous one left (as llama.cpp does), then `temperature`, then the
   draw. With `mirostat` 1 or 2 those filters are skipped (as in llama.cpp) and Mirostat's
   truncation at `temperature` comes before the draw; its mu is this Sampler's own.
   The filters beyond top_p live in `samplers_extra.py`.

Determinism: the draw is Gumbel-max over the final candidates: the token with the largest
`(logit - max) / temperature + g`, ties to the lowest id. Each token's noise
`g = -log(-log(u))` is a pure function of (seed, step, token id):
`u = ((w >> 12) + 0.5) / 2**52` for the word `w = mix64(key + (id + 1) * G)`, with
`key = mix64(mix64(seed) + (step + 1) * G)` (mix64 the splitmix64 finaliser, G its
increment 0x9E3779B97F4A7C15, arithmetic mod 2**64), and `step` counts this Sampler's
non-greedy tokens (0 first; a call that raises takes none). So a token's noise depends
neither on which other tokens are candidates nor on the batch nor on any random stream,
and the same seed and logits give the same tokens whatever else runs. It also keeps the
choice stable under the tiny logit differences batching causes (llama.cpp's float rounding
depends on what shares the batch): a perturbation of size e changes the token only when
the best two perturbed scores are within about 2e / temperature of each other, which has
probability of order e / temperature per token, whereas an inverse-CDF draw changes it
whenever u lies between the old and new position of any of the vocabulary-many CDF
boundaries, all of which move. Ties in every ranking (top_k, top_p, typical_p,
top_logprobs) go to the lowest token id.

Cost: the input logits are never written; plain greedy reads them without copying. Penalties
touch only the ids in the window; top_k uses `np.argpartition`; top_p and typical_p rank
only the best 1024 (then 8192) candidates and fall back to a full sort when those hold too
little mass, which keeps the result exact. The draw skips only candidates that provably
cannot win, so its result equals scoring every candidate: those more than `_PRUNE` below
the best scaled logit are left out before hashing when that leaves few, and of the rest only
the ones within a band (`_NEAR`) of the best, plus the few whose hash word is large enough to make up
their deficit, get the two logarithms. At usual temperatures nearly the whole vocabulary of
a real model lies within `_PRUNE`, so a full-vocabulary draw hashes every token (nine
uint64 passes): about twice an inverse-CDF draw's exp pass, far less than scoring them all.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ..types import SamplingParams
from . import samplers_extra as extra
from .gumbel import _GOLDEN, _MIX1, _MIX2, _bits_bound, _draw_key, _f32_floor, _scores, _weyl

__all__ = ["Sample", "Sampler", "PARTITION_SIZES"]

PARTITION_SIZES: tuple[int, ...] = (1024, 8192)
"""Candidate counts top_p/typical_p try (via argpartition) before a full sort."""

# Gumbel noise (from u = (k + 0.5) / 2**52, see gumbel.py) lies in [-log(53 ln 2), 53 ln 2]
# = [-3.61, 36.74]: a candidate whose scaled logit trails the best by more than 40.35 can
# never win. _PRUNE adds a margin.
_PRUNE = 42.0
# Scaled-logit distances within which the staged draw scores every candidate: the first
# that leaves at most _NEAR_MAX of them (else the last). A wider band means fewer far
# candidates whose hash word is large enough to need scoring (their share is ~e**-reach).
_NEAR = (6.0, 3.0, 1.0)
_NEAR_MAX = 512
_STAGED_MIN = 2048  # candidate count from which the staged draw pays off

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
    pre-fill the penalty windows. `pieces` (token id -> text) is needed only for DRY
    sequence breakers. Raises ValueError for a logit_bias id outside the vocab, or DRY
    breakers without `pieces`.
    """

    def __init__(
        self,
        params: SamplingParams,
        n_vocab: int,
        seed: int,
        prompt_tokens: Sequence[int] = (),
        pieces: Sequence[bytes] | None = None,
    ) -> None:
        if n_vocab <= 0:
            raise ValueError(f"n_vocab must be positive (got {n_vocab})")
        self.params = params
        self.n_vocab = n_vocab
        self._seed = seed % 2**64
        self._step = 0  # non-greedy tokens drawn so far: the draw's counter
        self._all_ids = np.arange(n_vocab, dtype=np.intp)
        self._all_ids.setflags(write=False)
        # Reused vocabulary-sized buffers (adjusted logits; exp weights): fresh large
        # temporaries on every token cost page faults, which are slow in VMs.
        self._scratch = np.empty(n_vocab, dtype=np.float32)
        self._work = np.empty(n_vocab, dtype=np.float32)
        self._blocked = np.empty(n_vocab, dtype=bool)
        self._bits = np.empty(n_vocab, dtype=np.uint64)  # hash words of the draw
        self._shifted = np.empty(n_vocab, dtype=np.uint64)
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
        dry = extra.Dry(params, prompt_tokens, pieces) if params.dry_multiplier > 0 else None
        self._dry = dry if dry is not None and dry.active else None
        self.mu = 2.0 * params.mirostat_tau  # Mirostat's running surprise bound

    def accept(self, token: int) -> None:
        """Record an emitted token in the penalty windows."""
        if self._penalize:
            self._window.append(token)
        if self._dry is not None:
            self._dry.accept(token)

    def sample(self, logits: np.ndarray, mask: np.ndarray | None = None) -> Sample:
        """Pick the next token from `logits` (1-D, length >= n_vocab, never modified).

        `mask` is a packed int32/uint32 bitmask of (n_vocab+31)//32 words (bit i%32 of word
        i//32 set = token i allowed). Raises ValueError when no token can be chosen (the
        mask allows nothing, or everything allowed is banned) or the inputs are malformed.
        Does not call `accept()`: the caller does, once the token is really emitted.
        """
        if mask is not None and self.params.greedy and not self._want_logprobs:
            # Greedy and the model's own first choice is allowed (the usual case inside a
            # value): it is also the first choice among the allowed, so the vocabulary-wide
            # unpacking and masking below can be skipped. Same token, ties included: both
            # pick the lowest id among equal maxima.
            _, x = self._candidates(logits, None)
            token = int(np.argmax(x))
            if x[token] > -np.inf and self._allows(mask, token):
                return Sample(token)
        ids, vals = self._candidates(logits, mask)
        p = self.params
        # Greedy reads the maximum off argmax (one pass, not two): argmax also stops at a
        # NaN, so the check below refuses the same rows vals.max() would.
        pos = int(np.argmax(vals)) if p.greedy else -1  # ids ascending: first max is the lowest id
        top_val = vals[pos] if p.greedy else vals.max()
        if not top_val > -np.inf:
            raise ValueError("no token can be sampled: every allowed logit is -inf (or one is NaN)")
        lse = self._logsumexp(vals, float(top_val)) if self._want_logprobs else 0.0
        token = int(ids[pos]) if p.greedy else self._draw(ids, vals)
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
        dry = self._dry.penalties() if self._dry is not None else None
        has_dry = dry is not None and len(dry[0]) > 0
        if len(self._bias_ids) or (self._penalize and self._window) or has_dry or x.dtype != np.float32:
            x = self._scratch
            np.copyto(x, logits[:n], casting="same_kind")
            x[self._bias_ids] += self._bias_vals
            if self._penalize and self._window:
                self._apply_penalties(x)
            if dry is not None and has_dry:
                inside = (dry[0] >= 0) & (dry[0] < n)
                x[dry[0][inside]] -= dry[1][inside]
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

    def _allows(self, mask: np.ndarray, token: int) -> bool:
        words = (self.n_vocab + 31) // 32
        if mask.ndim != 1 or len(mask) < words or mask.dtype.kind not in "iu" or mask.dtype.itemsize != 4:
            return False  # malformed: the full path reports it
        return bool((int(mask[token >> 5]) >> (token & 31)) & 1)

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
        if p.mirostat:
            return self._draw_mirostat(ids, vals)
        if 0 < p.top_k < len(vals):
            keep = np.sort(_top_positions(vals, p.top_k))
            ids, vals = ids[keep], vals[keep]
        if p.tfs_z < 1.0:
            ids, vals = extra.tail_free(ids, vals, p.tfs_z)
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
        if p.xtc_probability > 0.0:
            u = extra.unit_draw(self._seed, self._step)
            ids, vals = extra.xtc(ids, vals, p.xtc_probability, p.xtc_threshold, u)
        key = _draw_key(self._seed, self._step)
        self._step += 1
        return int(ids[self._gumbel_max(ids, vals, key)])

    def _draw_mirostat(self, ids: np.ndarray, vals: np.ndarray) -> int:
        """Mirostat's truncation, the draw, then mu's update from the drawn token's surprise."""
        p = self.params
        finite = vals > -np.inf
        if not finite.all():
            ids, vals = ids[finite], vals[finite]
        if p.mirostat == 1:
            ids, vals = extra.mirostat_v1(ids, vals, p.temperature, self.mu, self.n_vocab)
        else:
            ids, vals = extra.mirostat_v2(ids, vals, p.temperature, self.mu)
        key = _draw_key(self._seed, self._step)
        self._step += 1
        token = int(ids[self._gumbel_max(ids, vals, key)])
        self.mu -= p.mirostat_eta * (extra.surprise(ids, vals, p.temperature, token) - p.mirostat_tau)
        return token

    def _gumbel_max(self, ids: np.ndarray, vals: np.ndarray, key: int) -> int:
        """Position of the first maximum of `(vals - max) / T + gumbel(key, ids)`; -inf
        values never win. Candidates that provably cannot win are skipped, so the result
        is exactly that of scoring every candidate."""
        t = self.params.temperature
        top = float(vals.max())
        if len(vals) < _STAGED_MIN:  # -inf values score -inf
            return int(np.argmax(_scores(vals, top, t, self._hash(key, ids))))
        alive = vals >= _f32_floor(top - _PRUNE * t)  # also drops -inf
        n_alive = int(np.count_nonzero(alive))
        if n_alive >= _STAGED_MIN and n_alive * 4 >= len(vals):
            return self._gumbel_max_staged(ids, vals, key, top)  # the others score below
        pos = np.flatnonzero(alive)
        ids, vals = ids[pos], vals[pos]
        if n_alive >= _STAGED_MIN:
            return int(pos[self._gumbel_max_staged(ids, vals, key, top)])
        return int(pos[np.argmax(_scores(vals, top, t, self._hash(key, ids)))])

    def _gumbel_max_staged(self, ids: np.ndarray, vals: np.ndarray, key: int, top: float) -> int:
        """`_gumbel_max` for many candidates, taking logarithms for few of them. Those
        within `reach` of the best scaled logit are scored first; their best score S bounds
        the winner from below. Every other candidate trails by more than `reach`, so it can
        only win with noise above S + reach, i.e. with a hash word above a bound that one
        integer comparison per candidate checks. -inf candidates score -inf."""
        t = self.params.temperature
        bits = self._hash(key, ids)
        for reach in _NEAR:  # a flat top holds many near candidates: narrow the band
            near = np.flatnonzero(vals >= _f32_floor(top - reach * t))
            if len(near) <= _NEAR_MAX:
                break
        s_near = _scores(vals[near], top, t, bits[near])
        # 1e-6 of slack covers the rounding of the scores (~1e-14 here).
        lucky = np.flatnonzero(bits >= np.uint64(_bits_bound(float(s_near.max()) + reach - 1e-6)))
        pos = np.concatenate((near, lucky))  # near and lucky may overlap: harmless
        score = np.concatenate((s_near, _scores(vals[lucky], top, t, bits[lucky])))
        return int(pos[score == score.max()].min())  # ties to the lowest position (= id)

    def _hash(self, key: int, ids: np.ndarray) -> np.ndarray:
        """splitmix64 outputs number ids + 1 of the stream seeded with `key`: uint64 words
        in the reused buffer (valid until the next call)."""
        n = len(ids)
        x, tmp = self._bits[:n], self._shifted[:n]
        if n == self.n_vocab:  # every id, ascending
            np.add(_weyl(self.n_vocab), np.uint64(key), out=x)
        else:
            np.add(ids, 1, out=x, casting="unsafe")
            x *= np.uint64(_GOLDEN)
            x += np.uint64(key)
        np.right_shift(x, np.uint64(30), out=tmp)
        x ^= tmp
        x *= np.uint64(_MIX1)
        np.right_shift(x, np.uint64(27), out=tmp)
        x ^= tmp
        x *= np.uint64(_MIX2)
        np.right_shift(x, np.uint64(31), out=tmp)
        x ^= tmp
        return x

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

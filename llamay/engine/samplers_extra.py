"""llama.cpp's further samplers in numpy: tail-free, XTC, Mirostat v1/v2 and DRY.

Each filter takes and returns a candidate set as (ids ascending, logits); probabilities are
the softmax of the logits over the current candidates (temperature 1 unless stated), and
rankings break ties to the lowest token id, as everywhere in `sampler.py`. The rules are
those of llama.cpp's src/llama-sampling.cpp:

- Tail-free (`tfs_z`): sort by probability, take the absolute second differences of the
  sorted probabilities, normalise them to sum 1 (uniform when their sum is <= 1e-6) and
  keep the first i tokens where i is the first index at which their running sum exceeds z
  (at least one token; all when none does). Off when z >= 1 or at most 2 candidates.
- XTC: with probability `xtc_probability` (a per-step uniform from the seed), every token
  whose probability is >= `xtc_threshold` is removed except the least probable of them;
  nothing happens when fewer than two reach the threshold, or the threshold is above 0.5.
- Mirostat v1 (m = 100): estimate the Zipf exponent s from the 100 most probable tokens
  (least squares of log(p_i / p_i+1) on log((i + 2) / (i + 1))), keep the top
  k = (e * 2**mu / (1 - N**-e)) ** (1 / s) tokens (e = s - 1, N the vocabulary size).
- Mirostat v2: keep the tokens whose surprise -log2(p) is at most mu (at least one).
  Both then draw over the kept tokens and update mu -= eta * (surprise - tau), where the
  surprise is that of the drawn token among the kept ones; mu starts at 2 * tau.
- DRY: for each earlier position j of the window whose run of tokens ending at j equals
  the window's last n >= allowed_length tokens, the token that followed j would extend a
  repetition of length n; its logit loses multiplier * base ** (n - allowed_length) for
  the largest such n. A repetition never reaches back past a sequence breaker: n is capped
  at the number of tokens after the last token in which a breaker's text ends.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

import numpy as np

from ..types import SamplingParams

__all__ = ["Dry", "mirostat_v1", "mirostat_v2", "surprise", "tail_free", "unit_draw", "xtc"]

_MIROSTAT_M = 100
_FLOAT_MAX_LOG = 88.7228391  # log(FLT_MAX): DRY's exponent is clamped below it
_MASK64 = (1 << 64) - 1
_XTC_SALT = 0x58544321  # separates XTC's uniform stream from the draw's noise


def _probs(vals: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Softmax of vals / temperature, float64."""
    x = vals.astype(np.float64) / temperature
    x -= x.max()
    np.exp(x, out=x)
    return x / x.sum()


def _order(p: np.ndarray) -> np.ndarray:
    """Positions by descending probability, ties to the lowest position (= id)."""
    return np.argsort(-p, kind="stable")


def tail_free(ids: np.ndarray, vals: np.ndarray, z: float) -> tuple[np.ndarray, np.ndarray]:
    """Tail-free sampling's candidates (see the module docstring)."""
    n = len(vals)
    if z >= 1.0 or n <= 2:
        return ids, vals
    p = _probs(vals)
    order = _order(p)
    sp = p[order]
    d2 = np.abs(np.diff(sp, n=2))
    total = float(d2.sum())
    d2 = d2 / total if total > 1e-6 else np.full(len(d2), 1.0 / len(d2))
    over = np.flatnonzero(np.cumsum(d2) > z)
    last = int(over[0]) if len(over) else n
    keep = np.sort(order[: max(last, 1)])
    return ids[keep], vals[keep]


def xtc(
    ids: np.ndarray, vals: np.ndarray, probability: float, threshold: float, u: float
) -> tuple[np.ndarray, np.ndarray]:
    """XTC's candidates for the uniform `u` in [0, 1) (see the module docstring)."""
    if probability <= 0.0 or threshold > 0.5 or len(vals) < 2 or u > probability:
        return ids, vals
    p = _probs(vals)
    above = np.flatnonzero(p >= threshold)
    if len(above) < 2:
        return ids, vals
    # Of the tokens at or above the threshold, the least probable stays (the last in the
    # descending order whose ties go to the lowest id).
    last = above[_order(p[above])[-1]]
    drop = np.zeros(len(vals), dtype=bool)
    drop[above] = True
    drop[last] = False
    keep = np.flatnonzero(~drop)
    return ids[keep], vals[keep]


def mirostat_v1(
    ids: np.ndarray, vals: np.ndarray, temperature: float, mu: float, n_vocab: int
) -> tuple[np.ndarray, np.ndarray]:
    """Mirostat v1's candidates: the top k tokens at this temperature."""
    n = len(vals)
    if n < 2:
        return ids, vals
    p = _probs(vals, temperature)
    order = _order(p)
    top = p[order[: min(_MIROSTAT_M, n)]]
    i = np.arange(len(top) - 1, dtype=np.float64)
    t = np.log((i + 2) / (i + 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        b = np.log(top[:-1] / top[1:])
    ok = np.isfinite(b)
    s_hat = float(np.dot(t[ok], b[ok]) / np.dot(t[ok], t[ok])) if ok.any() else 0.0
    k = _mirostat_k(s_hat, mu, n_vocab)
    keep = np.sort(order[: max(1, min(k, n))])
    return ids[keep], vals[keep]


def _mirostat_k(s_hat: float, mu: float, n_vocab: int) -> int:
    eps = s_hat - 1.0
    try:
        if s_hat <= 0.0:
            return n_vocab
        if abs(eps) < 1e-9:  # the limit of e / (1 - N**-e) as e -> 0 is 1 / ln N
            base = 2.0**mu / math.log(n_vocab)
        else:
            base = eps * 2.0**mu / (1.0 - float(n_vocab) ** -eps)
        k = base ** (1.0 / s_hat)
    except (OverflowError, ZeroDivisionError, ValueError):
        return n_vocab
    return int(k) if math.isfinite(k) and k < n_vocab else n_vocab


def mirostat_v2(
    ids: np.ndarray, vals: np.ndarray, temperature: float, mu: float
) -> tuple[np.ndarray, np.ndarray]:
    """Mirostat v2's candidates: surprise at this temperature at most mu (at least the
    most probable token)."""
    p = _probs(vals, temperature)
    with np.errstate(divide="ignore"):
        keep = np.flatnonzero(-np.log2(p) <= mu)
    if len(keep) == 0:
        keep = _order(p)[:1]
    return ids[keep], vals[keep]


def surprise(ids: np.ndarray, vals: np.ndarray, temperature: float, token: int) -> float:
    """-log2 of `token`'s probability among the candidates at this temperature."""
    p = _probs(vals, temperature)
    return -math.log2(float(p[np.searchsorted(ids, token)]))


def unit_draw(seed: int, step: int) -> float:
    """A uniform in [0, 1) that is a pure function of (seed, step): XTC's coin."""
    z = (seed * 0x9E3779B97F4A7C15 + (step + 1) * _XTC_SALT) & _MASK64
    for shift, mult in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB)):
        z = ((z ^ (z >> shift)) * mult) & _MASK64
    z ^= z >> 31
    return (z >> 11) * 2.0**-53


class Dry:
    """One request's DRY state: its token history (prompt, then accepted tokens) and where
    the last sequence breaker ended. `pieces[i]` is token i's text; it is needed only when
    there are breakers (ValueError otherwise)."""

    def __init__(
        self, params: SamplingParams, prompt_tokens: Sequence[int], pieces: Sequence[bytes] | None
    ) -> None:
        self.multiplier = params.dry_multiplier
        self.base = params.dry_base
        self.allowed = params.dry_allowed_length
        last_n = params.dry_penalty_last_n
        self._history: deque[int] = deque(maxlen=None if last_n < 0 else max(last_n, 1))
        self._breakers = [b.encode() for b in params.dry_sequence_breakers]
        if self._breakers and pieces is None:
            raise ValueError("DRY sequence breakers need the vocabulary's token texts")
        self._pieces = pieces
        self._longest = max((len(b) for b in self._breakers), default=0)
        self._tail: deque[bytes] = deque()  # texts of the newest tokens, enough to hold a breaker
        self._count = 0  # tokens seen in all
        self._last_break = -1  # index (in all tokens seen) of the last token a breaker ends in
        self.active = self.multiplier > 0.0 and last_n != 0
        for token in prompt_tokens:
            self.accept(token)

    def accept(self, token: int) -> None:
        if not self.active:
            return
        self._history.append(token)
        if self._breakers and self._ends_breaker(token):
            self._last_break = self._count
        self._count += 1

    def _ends_breaker(self, token: int) -> bool:
        """Whether a breaker's text ends inside `token`'s text (given what came before)."""
        assert self._pieces is not None
        piece = self._pieces[token] if 0 <= token < len(self._pieces) else b""
        self._tail.append(piece)
        need = self._longest + len(piece)  # bytes that may hold an occurrence ending in `piece`
        while len(self._tail) > 1 and sum(map(len, self._tail)) - len(self._tail[0]) >= need:
            self._tail.popleft()
        if not piece:
            return False
        text = b"".join(self._tail)
        # An occurrence ends inside `piece` iff it starts after this bound.
        return any(text.find(b, max(0, len(text) - len(piece) - len(b) + 1)) >= 0 for b in self._breakers)

    def penalties(self) -> tuple[np.ndarray, np.ndarray]:
        """(token ids, amounts to subtract from their logits) for the next token."""
        empty = (np.empty(0, dtype=np.intp), np.empty(0, dtype=np.float32))
        w = np.fromiter(self._history, dtype=np.intp, count=len(self._history))
        n = len(w)
        if not self.active or n <= self.allowed:
            return empty
        rep_limit = min(n, self._count - 1 - self._last_break)
        if rep_limit < self.allowed:
            return empty
        # Match lengths of the window's suffix against the runs ending at each earlier j.
        lengths = np.zeros(n - 1, dtype=np.intp)
        alive = np.flatnonzero(w[:-1] == w[-1])
        d = 0
        while len(alive) and d < rep_limit:
            lengths[alive] += 1
            d += 1
            alive = alive[alive - d >= 0]
            alive = alive[w[alive - d] == w[n - 1 - d]]
        eligible = np.flatnonzero(lengths >= self.allowed)
        if len(eligible) == 0:
            return empty
        follow = w[eligible + 1]
        best: dict[int, int] = {}
        for tok, length in zip(follow.tolist(), lengths[eligible].tolist(), strict=True):
            if length > best.get(tok, -1):
                best[tok] = length
        max_exp = int(_FLOAT_MAX_LOG / math.log(self.base)) if self.base > 1.000001 else 0
        toks = np.fromiter(best.keys(), dtype=np.intp, count=len(best))
        exps = np.fromiter(best.values(), dtype=np.float64, count=len(best)) - self.allowed
        if max_exp > 0:
            exps = np.minimum(exps, max_exp)
        return toks, (self.multiplier * self.base**exps).astype(np.float32)

"""The hash-derived Gumbel noise of the sampler's draw (see `sampler.py` for the scheme):
pure functions of (seed, step, token id), independent of the batch and of any random stream.
"""

from __future__ import annotations

import functools
import math

import numpy as np

# splitmix64 constants (Steele, Lea, Flood 2014): Weyl increment and finaliser multipliers.
_GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
_MASK64 = (1 << 64) - 1
_U_BITS = 52  # u = (k + 0.5) / 2**52 for the top 52 hash bits k: exact, in [2**-53, 1 - 2**-53]

__all__ = ["_bits_bound", "_draw_key", "_f32_floor", "_gumbel", "_neg_gumbel", "_scores", "_weyl"]


def _mix64(z: int) -> int:
    """The splitmix64 finaliser on a Python int."""
    z = ((z ^ (z >> 30)) * _MIX1) & _MASK64
    z = ((z ^ (z >> 27)) * _MIX2) & _MASK64
    return z ^ (z >> 31)


def _draw_key(seed: int, step: int) -> int:
    """The hash key of draw `step`: splitmix64 output number step + 1 of the stream seeded
    with mix64(seed). Token i's word is then output number i + 1 of the stream seeded
    with the key (see `Sampler._hash`)."""
    return _mix64((_mix64(seed) + (step + 1) * _GOLDEN) & _MASK64)


@functools.lru_cache(maxsize=8)
def _weyl(n: int) -> np.ndarray:
    """(id + 1) * golden mod 2**64 for ids 0..n-1, shared read-only across samplers."""
    out = np.arange(1, n + 1, dtype=np.uint64)
    out *= np.uint64(_GOLDEN)
    out.setflags(write=False)
    return out


def _gumbel(bits: np.ndarray) -> np.ndarray:
    """Standard Gumbel noise, float64, from uint64 hash words (their top 52 bits)."""
    return np.negative(_neg_gumbel(bits))


def _neg_gumbel(bits: np.ndarray) -> np.ndarray:
    """log(-log(u)) with u = (k + 0.5) / 2**52 for the top 52 bits k of each word."""
    u = (bits >> np.uint64(64 - _U_BITS)).view(np.int64).astype(np.float64)
    u += 0.5
    u *= 2.0**-_U_BITS
    np.log(u, out=u)
    np.negative(u, out=u)
    return np.log(u, out=u)


def _scores(vals: np.ndarray, top: float, temperature: float, bits: np.ndarray) -> np.ndarray:
    """Perturbed scores (vals - top) / temperature + gumbel(bits), in float64."""
    s = vals.astype(np.float64)
    s -= top
    s /= temperature
    s -= _neg_gumbel(bits)  # the same value as adding the noise: negation is exact
    return s


def _bits_bound(score: float) -> int:
    """A hash word bound such that every word below it gives Gumbel noise below `score`;
    a multiple of 2**12, so that one uint64 comparison decides. 0 when `score` is at or
    below the bottom of the noise range."""
    # gumbel(k) < score  <=>  u(k) < exp(-exp(-score))  <=>  1 - u(k) > tail. Computing the
    # tail with expm1 keeps it accurate near 0; one step of k absorbs the remaining rounding.
    tail = -math.expm1(-math.exp(-score))
    k_max = math.floor((1.0 - tail) * 2.0**_U_BITS - 0.5) - 1
    return max(k_max + 1, 0) << (64 - _U_BITS)


def _f32_floor(x: float) -> np.float32:
    """The largest float32 <= x (comparisons against it are then conservative)."""
    f = np.float32(x)
    return f if float(f) <= x else np.nextafter(f, np.float32(-np.inf))

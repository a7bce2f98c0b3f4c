"""Tail-free, XTC, Mirostat and DRY against hand-computed references on small vectors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llamay.engine import samplers_extra as extra
from llamay.engine.sampler import Sampler
from llamay.errors import InvalidRequest
from llamay.types import SamplingParams


def _logits(probs: list[float]) -> np.ndarray:
    return np.log(np.array(probs, dtype=np.float64)).astype(np.float32)


# -- tail-free ---------------------------------------------------------------------------


def test_tail_free_keeps_the_expected_set() -> None:
    # Sorted p = .4 .3 .2 .06 .04: |second differences| = 0, .04, .12 -> 0, .25, .75;
    # running sums 0, .25, 1.0.
    ids = np.array([10, 11, 12, 13, 14])
    vals = _logits([0.06, 0.4, 0.04, 0.3, 0.2])  # shuffled: ranks follow the values
    kept, _ = extra.tail_free(ids, vals, 0.5)  # first sum above .5 at index 2: two tokens
    assert kept.tolist() == [11, 13]
    kept, _ = extra.tail_free(ids, vals, 0.2)  # above .2 at index 1: one token
    assert kept.tolist() == [11]
    kept, kept_vals = extra.tail_free(ids, vals, 1.0)  # off
    assert kept.tolist() == ids.tolist() and np.array_equal(kept_vals, vals)


def test_tail_free_small_sets() -> None:
    ids = np.arange(3)
    vals = _logits([0.5, 0.3, 0.2])  # one second difference, normalised to 1.0 > z at index 0
    assert extra.tail_free(ids, vals, 0.9)[0].tolist() == [0]
    two = extra.tail_free(np.arange(2), _logits([0.6, 0.4]), 0.1)[0]
    assert two.tolist() == [0, 1]  # two candidates: off


# -- XTC ---------------------------------------------------------------------------------


def test_xtc_removes_all_above_threshold_but_the_least_probable() -> None:
    ids = np.array([3, 5, 7, 9])
    vals = _logits([0.1, 0.4, 0.2, 0.3])
    kept, _ = extra.xtc(ids, vals, 1.0, 0.25, u=0.0)  # .4 and .3 reach .25: .4 goes
    assert kept.tolist() == [3, 7, 9]
    kept, _ = extra.xtc(ids, vals, 1.0, 0.15, u=0.0)  # .4 .3 .2 reach it: .2 stays
    assert kept.tolist() == [3, 7]


@pytest.mark.parametrize(
    ("probability", "threshold", "u"),
    [(0.5, 0.25, 0.7), (1.0, 0.35, 0.0), (1.0, 0.6, 0.0), (0.0, 0.25, 0.0)],
)
def test_xtc_leaves_the_set_alone(probability: float, threshold: float, u: float) -> None:
    ids = np.array([3, 5, 7, 9])
    vals = _logits([0.1, 0.4, 0.2, 0.3])
    assert extra.xtc(ids, vals, probability, threshold, u)[0].tolist() == [3, 5, 7, 9]


def test_xtc_coin_is_a_pure_function_of_seed_and_step() -> None:
    draws = [extra.unit_draw(42, s) for s in range(200)]
    assert draws == [extra.unit_draw(42, s) for s in range(200)]
    assert all(0.0 <= u < 1.0 for u in draws)
    assert 0.35 < sum(u < 0.5 for u in draws) / 200 < 0.65


# -- Mirostat ----------------------------------------------------------------------------


def test_mirostat_v1_keeps_k_from_the_zipf_estimate() -> None:
    # p_i ~ 1 / (i + 1)**2: the estimate is s = 2 exactly, so with N = 200 and mu = 6,
    # k = (1 * 2**6 / (1 - 200**-1)) ** (1 / 2) = 8.02 -> the 8 most probable tokens.
    n = 200
    p = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** 2
    ids = np.arange(n)
    vals = np.log(p / p.sum()).astype(np.float32)
    kept, _ = extra.mirostat_v1(ids, vals, 1.0, 6.0, n)
    assert kept.tolist() == list(range(8))


def test_mirostat_v2_truncates_at_mu_and_updates_it() -> None:
    # Surprises 1, 2, 3, 3 bits; mu = 2 * tau = 2.5 keeps the first two (p 2/3, 1/3).
    params = SamplingParams(mirostat=2, mirostat_tau=1.25, mirostat_eta=0.1)
    s = Sampler(params, 4, seed=7)
    assert s.mu == 2.5
    token = s.sample(_logits([0.5, 0.25, 0.125, 0.125])).token
    assert token in (0, 1)
    observed = -math.log2(2 / 3 if token == 0 else 1 / 3)
    assert s.mu == pytest.approx(2.5 - 0.1 * (observed - 1.25))


def test_mirostat_v1_updates_mu_from_the_renormalised_probability() -> None:
    n = 200
    p = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** 2
    logits = np.log(p / p.sum()).astype(np.float32)
    s = Sampler(SamplingParams(mirostat=1, mirostat_tau=3.0, mirostat_eta=0.5), n, seed=3)
    token = s.sample(logits).token
    assert 0 <= token < 8
    top = p[:8] / p[:8].sum()
    assert s.mu == pytest.approx(6.0 - 0.5 * (-math.log2(top[token]) - 3.0), rel=1e-5)


def test_mirostat_with_greedy_temperature_is_greedy() -> None:
    s = Sampler(SamplingParams(temperature=0.0, mirostat=2), 4, seed=1)
    assert s.sample(_logits([0.1, 0.6, 0.2, 0.1])).token == 1
    assert s.mu == 10.0  # untouched


# -- DRY ---------------------------------------------------------------------------------

_PIECES = [b"<s>", b"a", b":", b"c", b"d", b" x"]


def _dry(history: list[int], breakers: tuple[str, ...] = (), **kw: float) -> dict[int, float]:
    params = SamplingParams(
        dry_multiplier=0.8, dry_base=1.75, dry_allowed_length=2, dry_sequence_breakers=breakers
    )
    params = SamplingParams(**{**params.__dict__, **kw})
    d = extra.Dry(params, history, _PIECES)
    toks, amounts = d.penalties()
    return {int(t): float(a) for t, a in zip(toks, amounts, strict=True)}


def test_dry_penalises_the_token_that_would_extend_a_repetition() -> None:
    # 1 2 3 4 1 2 3: the suffix "1 2 3" (length 3) occurred before and was followed by 4.
    got = _dry([1, 2, 3, 4, 1, 2, 3])
    assert got == pytest.approx({4: 0.8 * 1.75 ** (3 - 2)})
    # Repeat length 1 < allowed length 2: nothing.
    assert _dry([1, 2, 3, 4, 5, 3]) == {}


def test_dry_takes_the_longest_repetition_per_token() -> None:
    # 3 4 1 3 4 1 3: the 3 at index 0 ends a match of length 1, the one at index 3 a match
    # of length 4 ("3 4 1 3", overlapping the suffix); both were followed by 4.
    got = _dry([3, 4, 1, 3, 4, 1, 3], dry_allowed_length=1)
    assert got == pytest.approx({4: 0.8 * 1.75 ** (4 - 1)})


def test_dry_sequence_breakers_cap_the_repetition() -> None:
    history = [1, 2, 3, 4, 1, 2, 3]  # token 2 is ":"
    # A breaker in the newest "2": one token after it, below the allowed length.
    assert _dry(history, (":",)) == {}
    # A breaker in the newest "1" ("a"): two tokens after it, so the length counts as 2.
    assert _dry(history, ("a",)) == pytest.approx({4: 0.8 * 1.75**0})
    # A breaker spanning two tokens ("c" then "d" reads "cd") ending in the old 4: no cap.
    assert _dry(history, ("cd",)) == pytest.approx({4: 0.8 * 1.75})
    # ... and one that spans the newest two tokens ("a:" = 1 then 2) caps as ":" does.
    assert _dry(history, ("a:",)) == {}


def test_dry_window_and_sampler_integration() -> None:
    assert _dry([1, 2, 3, 4, 1, 2, 3], dry_penalty_last_n=4) == {}  # 4 1 2 3: no earlier 3
    params = SamplingParams(temperature=0.0, dry_multiplier=5.0, dry_allowed_length=2)
    s = Sampler(params, 6, seed=0, prompt_tokens=[1, 2, 3, 4, 1, 2, 3])
    logits = np.array([0, 0, 0, 0, 3.0, 2.0], dtype=np.float32)
    assert s.sample(logits).token == 5  # 4 lost 5 * 1.75
    s.accept(5)
    assert s.sample(logits).token == 4  # "3 5" never occurred: no penalty


def test_dry_breakers_need_pieces() -> None:
    with pytest.raises(ValueError, match="token texts"):
        Sampler(SamplingParams(dry_multiplier=1.0, dry_sequence_breakers=("\n",)), 6, seed=0)


# -- determinism and validation ----------------------------------------------------------


def test_seeded_sampling_with_every_extra_sampler_is_deterministic() -> None:
    rng = np.random.default_rng(5)
    steps = [rng.normal(size=300).astype(np.float32) * 3 for _ in range(30)]
    for kw in (
        {"mirostat": 1},
        {"mirostat": 2, "mirostat_tau": 3.0},
        {"tfs_z": 0.9},
        {"xtc_probability": 0.7, "xtc_threshold": 0.01},
        {"dry_multiplier": 0.8, "dry_allowed_length": 1},
    ):
        runs = []
        for _ in range(2):
            s = Sampler(SamplingParams(temperature=0.8, **kw), 300, seed=11, prompt_tokens=[1, 2, 3])  # type: ignore[arg-type]
            out = []
            for logits in steps:
                tok = s.sample(logits).token
                s.accept(tok)
                out.append(tok)
            runs.append(out)
        assert runs[0] == runs[1], kw


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("mirostat", 3),
        ("mirostat_tau", -1.0),
        ("mirostat_eta", 1.5),
        ("tfs_z", 1.5),
        ("xtc_probability", -0.1),
        ("xtc_threshold", 2.0),
        ("dry_multiplier", -1.0),
        ("dry_base", 0.5),
        ("dry_allowed_length", -1),
        ("dry_penalty_last_n", -2),
        ("dry_sequence_breakers", ("",)),
    ],
)
def test_validate_names_the_bad_field(field: str, value: object) -> None:
    with pytest.raises(InvalidRequest) as err:
        SamplingParams(**{field: value}).validate()  # type: ignore[arg-type]
    assert err.value.param == field

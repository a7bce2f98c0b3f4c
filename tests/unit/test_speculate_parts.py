"""The pure parts of speculation: prompt lookup, the step-cost fit, how deep to guess."""

from __future__ import annotations

import pytest

from llamay.engine.speculate import PROBE_EVERY, Budget, CostFit, Lookup, SpecState, depth


def test_lookup_proposes_what_followed_the_latest_occurrence() -> None:
    look = Lookup(2, 3)
    tokens = [1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8, 6, 1, 2, 3]
    # [1, 2, 3] occurred twice before the end; the latest was followed by 7, 8, 6.
    assert look.propose(tokens, 3) == [7, 8, 6]
    assert look.propose(tokens, 1) == [7]
    # As tokens arrive the index follows: now [3, 7] recurs, followed by 8, 6, 1, ...
    tokens += [7]
    assert look.propose(tokens, 4) == [8, 6, 1, 2]


def test_lookup_prefers_the_longest_suffix_and_stops_at_the_known_end() -> None:
    look = Lookup(2, 3)
    # Suffix [5, 6] occurs at 0 (followed by 1) and, as part of [4, 5, 6], at 7 (followed by 2).
    tokens = [5, 6, 1, 9, 9, 9, 4, 5, 6, 2, 0, 4, 5, 6]
    assert look.propose(tokens, 2) == [2, 0]
    # A continuation reaching the end of what is known is cut there.
    assert Lookup(2, 3).propose([3, 4, 3, 4], 5) == [3, 4]


def test_lookup_finds_nothing_in_text_that_never_repeats() -> None:
    assert Lookup(2, 3).propose(list(range(50)), 8) == []
    assert Lookup(2, 3).propose([1], 8) == []


def test_lookup_index_grows_one_token_at_a_time_as_built_at_once() -> None:
    seq = [(7 * i) % 11 for i in range(60)]
    grown = Lookup(2, 3)
    for n in range(1, len(seq) + 1):
        got = grown.propose(seq[:n], 4)
        assert got == Lookup(2, 3).propose(seq[:n], 4), n


def test_cost_fit_reads_fixed_and_per_row_costs() -> None:
    fit = CostFit()
    assert fit.costs() is None
    for rows in [1, 1, 5, 3, 9, 1, 2, 7]:
        fit.add(rows, 0.040 + 0.005 * rows)
    fixed, per_row = fit.costs() or (0.0, 0.0)
    assert fixed == pytest.approx(0.040) and per_row == pytest.approx(0.005)
    # Steps of one size only give no slope.
    flat = CostFit()
    for _ in range(10):
        flat.add(1, 0.05)
    assert flat.costs() is None


def test_depth_deep_alone_shallow_in_a_full_batch_none_when_guesses_fail() -> None:
    alone = Budget(rows=64, decoding=1, costs=(0.040, 0.004))
    full = Budget(rows=64, decoding=8, costs=(0.040, 0.004))
    assert alone.depth(0.9, 8) == 8
    assert 0 < full.depth(0.9, 8) < alone.depth(0.9, 8)
    assert alone.depth(0.05, 8) == 0
    assert alone.depth(1.0, 3) == 3  # never past the limit
    # What guessing costs (a draft model's time) makes guesses shallower.
    assert alone.depth(0.8, 8, extra=0.010) < alone.depth(0.8, 8)


def test_a_failing_sequence_probes_again_now_and_then() -> None:
    state = SpecState(Lookup(2, 3), rate=0.01)
    budget = Budget(rows=64, decoding=1, costs=(0.040, 0.004))
    got = [depth(state, budget, 8) for _ in range(3 * PROBE_EVERY)]
    assert got.count(1) == 3 and set(got) == {0, 1}


def test_acceptance_rate_follows_what_is_taken() -> None:
    state = SpecState(Lookup(2, 3))
    for _ in range(20):
        state.record(4, 4)
    assert state.rate > 0.95
    for _ in range(20):
        state.record(4, 0)
    assert state.rate < 0.05

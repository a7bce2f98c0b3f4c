"""The n-gram penalty's incremental bookkeeping (the token index kept across calls, the
reused output buffer, the packed-mask fast path) gives exactly what a from-scratch
search gives."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest

from llamay.engine.packed_mask import PackedMask
from llamay.engine.repetition import NgramPenalty, RepetitionParams, structural_tokens
from llamay.engine.siblings import SIBLING_PENALTY, ArraySiblings

PIECES = [b"a", b"b", b"c", b"d", b"e", b'",', b" ", b"x", b"[", b'"', b"]"]
STRUCT = structural_tokens(PIECES)


def reference(params: RepetitionParams, history: list[int], source: list[int]) -> dict[int, float]:
    """The penalty's definition, searched from scratch: every earlier occurrence of the
    last token in the window, its match measured token by token."""
    g = NgramPenalty.SOURCE_GRAM
    grams = Counter(tuple(source[i : i + g]) for i in range(len(source) - g + 1))
    h = history[-params.window :]
    n = len(h)
    if n <= params.allowed_length:
        return {}
    found: dict[int, tuple[int, int]] = {}
    for j in range(n - 1):
        if h[j] != h[-1] or STRUCT[h[j + 1]]:
            continue
        length = 0
        while j - length >= 0 and h[j - length] == h[n - 1 - length] and length < n - 1 - j:
            length += 1
        if length >= params.allowed_length:
            best, copies = found.get(h[j + 1], (0, 0))
            found[h[j + 1]] = (max(best, length), copies + (length >= g - 1))
    out = {}
    for nxt, (length, copies) in found.items():
        copying = n >= g - 1 and copies < grams.get((*h[n - g + 1 :], nxt), 0)
        if not copying:
            out[nxt] = params.multiplier * params.base ** (length - params.allowed_length)
    return out


@pytest.mark.parametrize("allowed_length", [1, 2, 3])
@pytest.mark.parametrize("window", [8, 40])
def test_a_growing_history_is_penalised_as_if_searched_from_scratch(allowed_length: int, window: int) -> None:
    rng = random.Random(allowed_length * 100 + window)
    params = RepetitionParams(multiplier=1.0, base=2.0, allowed_length=allowed_length, window=window)
    for _ in range(20):
        source = [rng.randrange(len(PIECES)) for _ in range(30)]
        pen = NgramPenalty(params, STRUCT, source)
        history: list[int] = []
        for _ in range(120):
            # Few distinct tokens, so that echoes of every length occur.
            history.append(
                rng.choice([0, 1, 2, 0, 1, 5, 6]) if rng.random() < 0.8 else rng.randrange(len(PIECES))
            )
            assert pen.penalties(list(history)) == reference(params, history, source)


def test_a_history_that_does_not_extend_the_last_one_is_searched_anew() -> None:
    params = RepetitionParams(multiplier=1.0, base=2.0)
    pen = NgramPenalty(params, STRUCT)
    assert pen.penalties([0, 1, 2, 3, 0, 1]) == {2: 1.0}
    # Same length, then longer, then shorter, each differing from the last before its end.
    for history in (
        [0, 1, 3, 2, 0, 1],
        [4, 1, 3, 2, 0, 1, 3, 4, 0, 1],
        [2, 3, 4, 2, 3],
        [0, 1, 2, 3, 0, 1, 2],
    ):
        assert pen.penalties(history) == reference(params, history, [])
    assert pen.penalties([2, 3, 4, 2, 3]) == {4: 1.0}


def test_penalize_returns_its_input_untouched_when_nothing_is_penalised() -> None:
    logits = np.arange(len(PIECES), dtype=np.float32)
    pen = NgramPenalty(RepetitionParams(), STRUCT)
    assert pen.penalize(logits, [0, 1, 2, 3]) is logits


def test_the_reused_buffer_holds_each_step_s_own_penalties() -> None:
    pen = NgramPenalty(RepetitionParams(multiplier=1.0, base=2.0), STRUCT)
    logits = np.zeros(len(PIECES), dtype=np.float32)
    first = pen.penalize(logits, [0, 1, 2, 3, 0, 1]).copy()
    second = pen.penalize(logits, [0, 1, 2, 3, 0, 1, 2])
    assert first[2] == -1.0 and first[3] == 0.0
    assert second[2] == 0.0 and second[3] == -2.0  # nothing of the last step left behind
    assert not logits.any()


def packed(allowed: np.ndarray) -> PackedMask:
    words = np.packbits(allowed, bitorder="little")
    words = np.concatenate((words, np.zeros(-len(words) % 4, dtype=np.uint8))).view(np.uint32)
    return PackedMask(words, len(allowed))


def test_a_packed_mask_pushes_down_the_same_siblings_as_a_bool_mask() -> None:
    # "[" '"' a b '",' '"' a b : an echo of the first element, the array then spent.
    history = [8, 9, 0, 1, 5, 9, 0]
    rng = np.random.default_rng(3)
    for _ in range(20):
        allowed = rng.random(len(PIECES)) < 0.6
        allowed[1] = True
        results = []
        for mask in (allowed, packed(allowed)):
            sib = ArraySiblings(PIECES)
            sib.advance(history)
            sib.scan.stack[0][1] = True
            results.append(list(sib.pushed(mask)))
        assert results[0] == results[1] == ([5] if allowed[5] else [])


def test_a_token_both_echoed_and_pushed_takes_both_penalties_at_once() -> None:
    params = RepetitionParams(multiplier=0.8, base=1.75, allowed_length=1)
    pen = NgramPenalty(params, structural_tokens([b"a", b"b", b"c,", b"[", b'"']))
    allowed = np.ones(5, dtype=bool)
    pen.penalize(np.zeros(5, dtype=np.float32), [], [b"a", b"b", b"c,", b"[", b'"'], allowed)
    history = [3, 4, 0, 2, 4, 0]  # [ "a c, "a : continuing with "c," echoes, and opens
    assert pen.siblings is not None
    pen.siblings.advance(history)
    pen.siblings.scan.stack[0][1] = True
    logits = np.full(5, 0.3, dtype=np.float32)
    out = pen.penalize(logits, history, [b"a", b"b", b"c,", b"[", b'"'], allowed)
    assert out[2] == np.float32(0.3) - np.float32(0.8 * 1.75 + SIBLING_PENALTY)


def test_penalize_on_a_growing_history_penalises_as_if_searched_from_scratch() -> None:
    # With pieces and a mask the penalty takes each history to extend the last one.
    rng = random.Random(7)
    params = RepetitionParams(multiplier=1.0, base=2.0)
    source = [rng.randrange(len(PIECES)) for _ in range(30)]
    pen = NgramPenalty(params, STRUCT, source)
    history: list[int] = []
    everything = np.ones(len(PIECES), dtype=bool)
    for _ in range(150):
        history.append(rng.choice([0, 1, 2, 0, 1, 3, 6]))
        out = pen.penalize(np.zeros(len(PIECES), dtype=np.float32), list(history), PIECES, everything)
        # No JSON array is ever opened here, so the n-gram penalty is all there is.
        expected = np.zeros(len(PIECES), dtype=np.float32)
        for tok, value in reference(params, history, source).items():
            expected[tok] -= np.float32(value)
        assert out.tolist() == expected.tolist()


def test_the_openers_kept_while_the_scan_holds_still_are_those_a_fresh_scan_finds() -> None:
    # Inert tokens (no quote, bracket, brace, colon, comma or backslash) keep the last
    # openers; anything else, or a backslash before, looks them up again.
    pieces = [b"[", b"]", b"{", b"}", b'"', b"a", b" ", b",", b'",', b"},", b"\\", b":", b'"a":']
    everything = np.ones(len(pieces), dtype=bool)
    rng = random.Random(11)
    for _ in range(30):
        kept = ArraySiblings(pieces)
        history: list[int] = []
        for _ in range(60):
            history.append(rng.randrange(len(pieces)))
            kept.advance(history)
            fresh = ArraySiblings(pieces)
            fresh.advance(history)
            depth = fresh.scan.innermost_array()
            if depth is None:
                continue
            for sib in (kept, fresh):
                sib.scan.stack[depth][1] = True
            assert kept.pushed(everything) == fresh.pushed(everything)


@pytest.mark.parametrize(("allowed_above", "spent"), [(True, False), (False, True)])
def test_a_forbidden_first_choice_leaves_the_verdict_to_the_allowed_tokens(
    allowed_above: bool, spent: bool
) -> None:
    # [ "ab", "a : the model wants "b" again. Its raw first choice is "x", which the
    # grammar forbids; whether the echo is its first allowed choice decides.
    pen = NgramPenalty(RepetitionParams(allowed_length=1), STRUCT)
    allowed = np.ones(len(PIECES), dtype=bool)
    allowed[7] = False  # "x"
    pen.penalize(np.zeros(len(PIECES), dtype=np.float32), [], PIECES, packed(allowed))
    history = [8, 9, 0, 1, 5, 9, 0]
    logits = np.zeros(len(PIECES), dtype=np.float32)
    logits[1], logits[7] = 3.0, 9.0
    logits[2] = 4.0 if allowed_above else 2.0  # "c", allowed
    pen.penalize(logits, history, PIECES, packed(allowed))
    assert pen.siblings is not None
    assert (pen.siblings.spent_depth() == 0) is spent

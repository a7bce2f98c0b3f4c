"""Which running prompt a new request shares its first positions from (pure decisions)."""

from __future__ import annotations

import random

from llamay.engine.scheduler import MIN_FOLLOW, choose_leader, common_prefix


def test_common_prefix_matches_a_plain_scan() -> None:
    rng = random.Random(3)
    for _ in range(500):
        n = rng.randrange(0, 80)
        a = [rng.randrange(3) for _ in range(n)]
        b = a[: rng.randrange(0, n + 1)] + [rng.randrange(3) for _ in range(rng.randrange(0, 40))]
        limit = rng.randrange(0, 100)
        plain = 0
        while plain < min(len(a), len(b), limit) and a[plain] == b[plain]:
            plain += 1
        assert common_prefix(a, b, limit) == plain


def test_the_longest_shared_prompt_leads() -> None:
    doc = list(range(1000, 1300))
    prompts = [doc[:100] + [1], doc[:250] + [2], [7] * 300]
    assert choose_leader(doc, 0, 298, prompts) == (1, 250)


def test_the_limit_caps_what_is_taken() -> None:
    doc = list(range(400))
    assert choose_leader(doc, 0, 120, [doc]) == (0, 120)


def test_no_leader_unless_it_gains_enough_over_the_cache() -> None:
    doc = list(range(400))
    prompts = [doc[:200] + [-1]]
    assert choose_leader(doc, 200 - MIN_FOLLOW + 1, 398, prompts) is None
    assert choose_leader(doc, 200 - MIN_FOLLOW, 398, prompts) == (0, 200)
    assert choose_leader(doc, 0, 398, [[5] * 400]) is None
    assert choose_leader(doc, 0, 398, []) is None

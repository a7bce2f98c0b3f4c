from dataclasses import dataclass

from llamay.engine.scheduler import Slice, schedule


@dataclass
class S:
    n_past: int
    n_tokens: int


def test_decode_tokens_come_before_prompt_chunks() -> None:
    seqs = [S(0, 100), S(10, 11), S(5, 6)]
    plan = schedule(seqs, 64)
    assert plan[0] == Slice(1, 10, 1, True)
    assert plan[1] == Slice(2, 5, 1, True)
    assert plan[2] == Slice(0, 0, 62, False)  # a partial prompt chunk wants no logits


def test_budget_is_never_exceeded() -> None:
    seqs = [S(0, 300), S(0, 300), S(7, 8)]
    for budget in (1, 2, 50, 301, 1000):
        plan = schedule(seqs, budget)
        assert sum(s.count for s in plan) <= budget


def test_last_prompt_chunk_asks_for_logits() -> None:
    plan = schedule([S(40, 50)], 512)
    assert plan == [Slice(0, 40, 10, True)]


def test_idle_sequences_are_skipped() -> None:
    assert schedule([S(5, 5), S(0, 0)], 16) == []


def test_prefill_is_split_across_steps_in_arrival_order() -> None:
    seqs = [S(0, 30), S(0, 30)]
    plan = schedule(seqs, 40)
    assert plan == [Slice(0, 0, 30, True), Slice(1, 0, 10, False)]


def test_a_prompt_never_ends_in_a_chunk_of_one() -> None:
    # 11 pending with a budget of 10 would leave 1 for the next step: take 9 instead
    assert schedule([S(0, 11)], 10) == [Slice(0, 0, 9, False)]
    assert schedule([S(9, 11)], 10) == [Slice(0, 9, 2, True)]
    # one token of budget left after a decode: a first chunk of one is fine (two remain)
    assert schedule([S(5, 6), S(0, 3)], 2) == [Slice(0, 5, 1, True), Slice(1, 0, 1, False)]
    # but not a chunk that would leave the last token alone
    assert schedule([S(5, 6), S(1, 3)], 2) == [Slice(0, 5, 1, True)]


def test_random_budgets_never_strand_a_last_token() -> None:
    import random

    rng = random.Random(1)
    for _ in range(2000):
        seqs = [S(0, rng.randint(2, 40)) for _ in range(rng.randint(1, 4))]
        for _step in range(200):
            if all(s.n_tokens - s.n_past <= 0 for s in seqs):
                break
            plan = schedule(seqs, rng.randint(1, 30))
            for sl in plan:
                seq = seqs[sl.index]
                if sl.start + sl.count == seq.n_tokens and sl.start > 0:
                    assert sl.count >= 2  # the last token is computed with its predecessor
                seq.n_past += sl.count

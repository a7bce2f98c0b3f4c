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

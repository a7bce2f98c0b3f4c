"""Admission and KV-pressure preemption: the scheduler's decisions, without weights."""

from __future__ import annotations

import random
from dataclasses import dataclass

from llamay.engine.scheduler import Admission, Preemption, Verdict, preempt


@dataclass
class Run:
    n_past: int
    n_tokens: int
    n_prompt: int = 0

    @property
    def n_generated(self) -> int:
        return max(0, self.n_tokens - self.n_prompt)


def run_pass(admission: Admission, queue: list[tuple[int, bool]]) -> list[Verdict]:
    """Drive a pass the way the engine does: verdicts head first, until one says wait."""
    out: list[Verdict] = []
    for n_prompt, aborted in queue:
        verdict = admission.verdict(n_prompt, aborted)
        out.append(verdict)
        if verdict == "wait":
            break
        if verdict == "admit":
            admission.started(n_prompt)
    return out


def test_requests_are_admitted_up_to_the_cap() -> None:
    a = Admission.begin([Run(5, 6)], concurrency=3, n_ctx=1000)
    assert run_pass(a, [(10, False)] * 4) == ["admit", "admit", "wait"]
    assert a.n_running == 3


def test_an_aborted_request_is_dropped_but_only_when_a_slot_is_free() -> None:
    a = Admission.begin([], concurrency=1, n_ctx=100)
    assert run_pass(a, [(5, True), (5, False), (5, True)]) == ["drop", "admit", "wait"]


def test_a_prompt_that_does_not_fit_beside_the_running_ones_waits_and_holds_the_queue() -> None:
    a = Admission.begin([Run(50, 60)], concurrency=8, n_ctx=100)
    # 60 used + 40 + 1 > 100: it waits, and the short one behind it is not let past
    assert run_pass(a, [(40, False), (2, False)]) == ["wait"]
    b = Admission.begin([Run(50, 60)], concurrency=8, n_ctx=100)
    assert run_pass(b, [(39, False), (2, False)]) == ["admit", "wait"]  # 60 + 40 = 100 fits


def test_a_request_alone_is_admitted_whatever_its_length() -> None:
    a = Admission.begin([], concurrency=2, n_ctx=100)
    assert run_pass(a, [(99, False), (1, False)]) == ["admit", "wait"]


def test_admitted_requests_never_overcommit_the_context() -> None:
    rng = random.Random(7)
    for _ in range(500):
        n_ctx = rng.randint(20, 400)
        running = [Run(0, rng.randint(1, n_ctx // 3)) for _ in range(rng.randint(0, 3))]
        queue = [(rng.randint(1, n_ctx - 1), rng.random() < 0.2) for _ in range(rng.randint(1, 10))]
        cap = rng.randint(1, 6)
        a = Admission.begin(running, cap, n_ctx)
        verdicts = run_pass(a, queue)
        admitted = [n for (n, _), v in zip(queue, verdicts, strict=False) if v == "admit"]
        need = sum(r.n_tokens for r in running) + sum(n + 1 for n in admitted)
        assert need <= n_ctx or (not running and len(admitted) == 1)
        assert len(running) + len(admitted) <= max(cap, len(running))
        if "wait" not in verdicts:
            assert len(verdicts) == len(queue)  # the pass only stops on a wait


def test_preemption_puts_back_the_last_planned_request_still_reading_its_prompt() -> None:
    running = [Run(30, 31, 20), Run(10, 40, 40), Run(5, 50, 50), Run(0, 9, 9)]
    assert preempt(running, planned=[0, 1, 2]) == Preemption(2, requeue=True)
    assert preempt(running, planned=[2, 1]) == Preemption(1, requeue=True)


def test_a_request_that_generated_is_never_put_back() -> None:
    # putting back a request that generated would throw its tokens away
    running = [Run(10, 25, 20), Run(40, 41, 30)]
    assert preempt(running, planned=[0, 1]) == Preemption(1, requeue=False)


def test_the_only_request_ends_rather_than_being_put_back() -> None:
    assert preempt([Run(10, 40, 40)], planned=[0]) == Preemption(0, requeue=False)


def test_without_a_prompt_reader_the_longest_ends_first_of_equals() -> None:
    running = [Run(30, 31, 10), Run(50, 51, 10), Run(50, 51, 5)]
    assert preempt(running, planned=[0, 1, 2]) == Preemption(1, requeue=False)


def test_a_prompt_reader_outside_the_plan_is_not_chosen() -> None:
    running = [Run(30, 31, 10), Run(0, 40, 40)]
    assert preempt(running, planned=[0]) == Preemption(0, requeue=False)

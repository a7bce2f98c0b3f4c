"""The thinking budget in the engine (Sequence.budget_token / track_thinking) and the effort
levels' budgets: which token is forced when, without weights."""

from __future__ import annotations

from llamay.chat.flow import effort_budget
from llamay.engine.request import ConstraintPlan, GenerateRequest, Handle
from llamay.engine.sequence import Sequence
from llamay.types import StopSpec

OPEN, CLOSE_A, CLOSE_B, WORD = 90, 91, 92, 5


def run(plan: ConstraintPlan, *, max_tokens: int | None = None, model: list[int] | None = None) -> list[int]:
    """Generate 40 tokens (or to max_tokens): the forced ones where the engine forces, else
    the next of `model`'s tokens (WORD once they run out); returns what was generated."""
    request = GenerateRequest(tokens=[1, 2, 3], stop=StopSpec(max_tokens=max_tokens), constraint=plan)
    s = Sequence(Handle(request), lambda e: None, 0, 100, 0)
    wants = list(model or [])
    for _ in range(max_tokens or 40):
        forced = s.budget_token()
        token = forced if forced is not None else (wants.pop(0) if wants else WORD)
        s.tokens.append(token)
        s.track_thinking(token)
    return s.tokens[3:]


def test_budget_forces_the_whole_close_marker_once() -> None:
    plan = ConstraintPlan(None, budget=4, close=(CLOSE_A, CLOSE_B), thinking=True)
    out = run(plan)
    assert out[:6] == [WORD] * 4 + [CLOSE_A, CLOSE_B]
    assert CLOSE_A not in out[6:]  # closed once: never forced again


def test_a_block_the_model_opens_is_budgeted_from_its_open() -> None:
    plan = ConstraintPlan(None, budget=6, close=(CLOSE_A,), think_open=(OPEN,))
    out = run(plan, model=[WORD, WORD, OPEN])
    assert out[:7] == [WORD, WORD, OPEN, WORD, WORD, WORD, CLOSE_A]  # the budget counts all output
    assert run(plan, model=[WORD] * 40).count(CLOSE_A) == 0  # never opened: nothing to close


def test_a_block_the_model_closes_is_left_alone() -> None:
    plan = ConstraintPlan(None, budget=10, close=(CLOSE_A,), thinking=True)
    out = run(plan, model=[WORD, CLOSE_A, WORD])
    assert out.count(CLOSE_A) == 1 and out[1] == CLOSE_A


def test_a_constrained_answer_keeps_its_room() -> None:
    # No budget: thinking may run until half of max_tokens (and the close) is left.
    plan = ConstraintPlan(None, close=(CLOSE_A, CLOSE_B), thinking=True, reserve_share=0.5)
    out = run(plan, max_tokens=20)
    assert out.index(CLOSE_A) == 8 and out[9] == CLOSE_B  # 20 - 8 = 12 = 10 of room + the close
    bounded = ConstraintPlan(None, close=(CLOSE_A,), thinking=True, reserve=3, reserve_share=0.5)
    assert run(bounded, max_tokens=20).index(CLOSE_A) == 16  # a bound under the share wins


def test_thinking_off_is_a_budget_of_zero() -> None:
    plan = ConstraintPlan(None, budget=0, close=(CLOSE_A,), thinking=True)
    assert run(plan)[0] == CLOSE_A


def test_a_lone_budget_token_still_means_an_open_block() -> None:
    plan = ConstraintPlan(None, budget=2, budget_token=CLOSE_A)
    assert run(plan)[:3] == [WORD, WORD, CLOSE_A]


def test_no_budget_and_no_room_to_keep_thinks_to_the_end() -> None:
    plan = ConstraintPlan(None, close=(CLOSE_A,), thinking=True)
    assert CLOSE_A not in run(plan, max_tokens=30)


def test_effort_levels() -> None:
    assert effort_budget("low") == 1024 and effort_budget("minimal") == 256
    assert effort_budget("high") is None and effort_budget(None) is None and effort_budget("other") is None

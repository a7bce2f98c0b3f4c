"""The per-sequence sampling step returns an Outcome and publishes nothing itself, over
llguidance's byte tokenizer (no model weights)."""

from __future__ import annotations

import numpy as np

from llamay.engine.request import ConstraintPlan, GenerateRequest, Handle
from llamay.engine.sampling_step import Finish, Outcome, sample_step
from llamay.engine.sequence import Sequence
from llamay.grammar import Grammar, byte_compile_cache, byte_tokenizer
from llamay.types import Event, SamplingParams, StopSpec

CACHE = byte_compile_cache()
VOCAB = byte_tokenizer().vocab_size
EOS = byte_tokenizer().eos_token
PROMPT = [ord(c) for c in "hi:"]


class FakeModel:
    """What the step reads of a model: a byte vocabulary with one end-of-generation token."""

    n_vocab = VOCAB
    eog_ids = frozenset({EOS})
    pieces = [bytes([i]) for i in range(256)] + [b""] * (VOCAB - 256)
    compile_cache = CACHE


MODEL = FakeModel()


def make(
    stop: StopSpec | None = None, constraint: ConstraintPlan | None = None
) -> tuple[Sequence, list[Event]]:
    published: list[Event] = []
    req = GenerateRequest(list(PROMPT), SamplingParams(temperature=0), stop or StopSpec(), constraint)
    s = Sequence(Handle(req), published.append, 3, VOCAB, seed=1)
    if constraint is not None and not constraint.lazy:
        s.activate(CACHE)
    s.n_past = len(s.tokens)
    return s, published


def favour(*tokens: int | str) -> np.ndarray:
    """Logits ranking `tokens` first, in order; every other token far below."""
    logits = np.full(VOCAB, -10.0, dtype=np.float32)
    for rank, t in enumerate(tokens):
        logits[ord(t) if isinstance(t, str) else t] = 10.0 - rank
    return logits


def test_a_token_is_returned_not_published() -> None:
    s, published = make()
    out = sample_step(s, favour("a"), MODEL, n_ctx=64)
    assert out.finish is None
    assert out.token is not None and out.token.token == ord("a") and out.token.text == "a"
    assert out.token.token_bytes == b"a"
    assert s.tokens == [*PROMPT, ord("a")]
    assert published == [] and not s.done  # publishing and finishing are the engine's


def test_a_zero_token_budget_finishes_without_sampling() -> None:
    s, _ = make(StopSpec(max_tokens=0))
    assert sample_step(s, favour("a"), MODEL, n_ctx=64) == Outcome(finish=Finish("length"))
    assert s.tokens == PROMPT


def test_end_of_generation_is_billed_but_not_kept() -> None:
    s, _ = make()
    assert sample_step(s, favour(EOS), MODEL, n_ctx=64) == Outcome(finish=Finish("stop", n_extra=1))
    assert s.tokens == PROMPT and s.t_first is not None


def test_ignore_eos_emits_the_end_token_as_a_token() -> None:
    s, _ = make(StopSpec(ignore_eos=True))
    out = sample_step(s, favour(EOS), MODEL, n_ctx=64)
    assert out.token is not None and out.token.token == EOS and out.finish is None


def test_the_last_token_of_the_budget_comes_with_its_finish() -> None:
    s, _ = make(StopSpec(max_tokens=2))
    first = sample_step(s, favour("a"), MODEL, n_ctx=64)
    assert first.finish is None
    last = sample_step(s, favour("b"), MODEL, n_ctx=64)
    assert last.token is not None and last.token.text == "b"
    assert last.finish == Finish("length")


def test_a_stop_string_holds_its_text_back_and_stops() -> None:
    s, _ = make(StopSpec(stop=("ab",)))
    held = sample_step(s, favour("a"), MODEL, n_ctx=64)
    assert held.token is not None and held.token.text == "" and held.finish is None
    out = sample_step(s, favour("b"), MODEL, n_ctx=64)
    assert out.token is not None and out.token.text == ""
    assert out.finish == Finish("stop")


def test_a_full_context_ends_with_a_message() -> None:
    s, _ = make()
    out = sample_step(s, favour("a"), MODEL, n_ctx=len(PROMPT) + 1)
    assert out.token is not None
    assert out.finish == Finish("length", f"the context is full ({len(PROMPT) + 1} tokens)")


def test_the_mask_decides_and_a_finished_format_stops() -> None:
    s, _ = make(constraint=ConstraintPlan(Grammar.from_regex("[0-9]{2}")))
    first = sample_step(s, favour("a", "7"), MODEL, n_ctx=64)  # "a" is the model's choice
    assert first.token is not None and first.token.text == "7" and first.finish is None
    second = sample_step(s, favour("x", "4"), MODEL, n_ctx=64)
    assert second.token is not None and second.token.text == "4"
    assert second.finish == Finish("stop")  # nothing can follow "74"
    assert s.mask_steps == 2


def test_the_budget_ending_inside_the_format_says_the_output_is_incomplete() -> None:
    s, _ = make(StopSpec(max_tokens=1), ConstraintPlan(Grammar.from_regex("[0-9]{3}")))
    out = sample_step(s, favour("1"), MODEL, n_ctx=64)
    assert out.finish is not None and out.finish.reason == "length"
    assert out.finish.message is not None and "inside the required format" in out.finish.message


def test_a_mask_the_model_cannot_meet_is_an_error_outcome() -> None:
    s, _ = make(constraint=ConstraintPlan(Grammar.from_regex("[0-9]+")))
    logits = np.full(VOCAB, -np.inf, dtype=np.float32)
    logits[ord("a")] = 0.0  # the model can produce nothing the format allows
    out = sample_step(s, logits, MODEL, n_ctx=64)
    assert out.token is None
    assert out.finish is not None and out.finish.reason == "error"
    assert out.finish.message is not None and "no token can continue" in out.finish.message
    assert s.tokens == PROMPT


def test_the_thinking_budget_forces_its_token_whatever_the_logits() -> None:
    z = ord("z")
    plan = ConstraintPlan(None, trigger_tokens=frozenset({z}), budget=1, budget_token=z)
    s, _ = make(constraint=plan)
    assert sample_step(s, favour("a"), MODEL, n_ctx=64).token is not None
    forced = sample_step(s, favour("a"), MODEL, n_ctx=64)
    assert forced.token is not None and forced.token.token == z
    assert s.active  # the forced token is the trigger: the plan switched on

"""Prompt log-probabilities (GenerateRequest.prompt_logprobs) on the real engine, without HTTP:
each prompt token's score must equal what generating after its prefix reports."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from llamay.backend.context import Context, ContextConfig
from llamay.backend.model import Model
from llamay.engine.client import iter_events
from llamay.engine.engine import Engine, EngineConfig
from llamay.engine.request import GenerateRequest
from llamay.types import FinishEvent, SamplingParams, StopSpec, TokenEvent


@pytest.fixture(scope="module")
def model(tiny_model_path: Path) -> Iterator[Model]:
    with Model(tiny_model_path) as m:
        yield m


@pytest.fixture(scope="module")
def engine(model: Model) -> Iterator[Engine]:
    # A small batch: a prompt of a few dozen tokens is decoded over several steps.
    ctx = Context(model, ContextConfig(n_ctx=2048, n_batch=16, n_seq_max=8))
    e = Engine(model, ctx, EngineConfig(concurrency=4))
    yield e
    e.close()


def run(engine: Engine, req: GenerateRequest) -> tuple[list[TokenEvent], FinishEvent]:
    events: list[TokenEvent] = []
    for ev in iter_events(engine, req):
        if isinstance(ev, TokenEvent):
            events.append(ev)
        elif isinstance(ev, FinishEvent):
            return events, ev
    raise AssertionError("no finish event")


def test_prompt_scores_equal_next_token_logprobs_of_each_prefix(model: Model, engine: Engine) -> None:
    prompt = model.tokenize(
        "The little dog ran to the house and then the cat sat on the old mat", add_special=False
    )
    prompt = (prompt * 3)[:40]
    _, fin = run(
        engine,
        GenerateRequest(prompt, SamplingParams(temperature=0), StopSpec(max_tokens=0), prompt_logprobs=5),
    )
    assert fin.prompt_logprobs is not None and len(fin.prompt_logprobs) == len(prompt) - 1
    greedy5 = SamplingParams(temperature=0, logprobs=True, top_logprobs=5)
    for i in range(2, len(prompt)):
        score = fin.prompt_logprobs[i - 1]
        assert score.token == prompt[i] and score.text == model.piece(prompt[i])
        events, _ = run(engine, GenerateRequest(prompt[:i], greedy5, StopSpec(max_tokens=1), cache=False))
        ref = events[0].top
        assert [t.token for t in score.top] == [t.token for t in ref], i
        for got, want in zip(score.top, ref, strict=True):
            assert got.logprob == pytest.approx(want.logprob, abs=1e-3)
        for t in ref:
            if t.token == prompt[i]:
                assert score.logprob == pytest.approx(t.logprob, abs=1e-3)
        assert score.logprob <= score.top[0].logprob + 1e-9


def test_without_the_flag_there_are_no_scores(model: Model, engine: Engine) -> None:
    prompt = model.tokenize("The little dog ran", add_special=False)
    _, fin = run(engine, GenerateRequest(prompt, SamplingParams(temperature=0), StopSpec(max_tokens=2)))
    assert fin.prompt_logprobs is None


def test_scores_ignore_the_prefix_cache(model: Model, engine: Engine) -> None:
    prompt = model.tokenize("Once upon a time the river ran to the sea " * 3, add_special=False)
    req = GenerateRequest(prompt, SamplingParams(temperature=0), StopSpec(max_tokens=0), prompt_logprobs=2)
    _, cold = run(engine, req)
    _, warm = run(engine, GenerateRequest(prompt, req.sampling, req.stop, prompt_logprobs=2))  # cached now
    assert cold.prompt_logprobs == warm.prompt_logprobs
    assert warm.usage.cached_tokens == 0


def test_scoring_from_a_token_shares_the_cached_prefix(model: Model, engine: Engine) -> None:
    head = model.tokenize("Once upon a time the old river ran down to the sea " * 2, add_special=False)
    tail = model.tokenize(" and the fish swam home", add_special=False)
    greedy = SamplingParams(temperature=0)
    _, whole = run(
        engine, GenerateRequest(head + tail, greedy, StopSpec(max_tokens=0), prompt_logprobs=3, cache=False)
    )
    run(engine, GenerateRequest(head, greedy, StopSpec(max_tokens=0)))  # the prompt, cached
    req = GenerateRequest(
        head + tail, greedy, StopSpec(max_tokens=0), prompt_logprobs=3, score_from=len(head)
    )
    _, shared = run(engine, req)
    assert shared.usage.cached_tokens > 0  # the prompt's KV was shared in, not recomputed
    assert whole.prompt_logprobs is not None and shared.prompt_logprobs is not None
    assert len(shared.prompt_logprobs) == len(tail)
    for got, want in zip(shared.prompt_logprobs, whole.prompt_logprobs[len(head) - 1 :], strict=True):
        assert got.token == want.token and [t.token for t in got.top] == [t.token for t in want.top]
        assert got.logprob == pytest.approx(want.logprob, abs=1e-4)

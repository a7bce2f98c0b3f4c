"""Speculative decoding never changes a token: the same requests on an engine with speculation
on and one with it off give bitwise the same tokens, log-probabilities, text and finish, alone
and batched, on every sampling path (greedy, seeded draws, logit bias, penalties, DRY,
Mirostat, stop strings, constraints, budgets at max_tokens and at the end of the context).

Random weights copy nothing by themselves, so the requests narrow the model's choice with
logit bias to a few tokens: its output then repeats n-grams, prompt lookup guesses from them,
and some guesses are taken and some are not (each case checks both happened, so the KV of
refused drafts is really dropped and generation goes on past it).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from llamay.backend.context import Context, ContextConfig
from llamay.backend.model import Model
from llamay.engine.client import iter_events
from llamay.engine.draft_model import DraftModel
from llamay.engine.engine import Engine, EngineConfig
from llamay.engine.request import ConstraintPlan, GenerateRequest
from llamay.engine.speculate import CostFit, SpecConfig
from llamay.grammar import Grammar
from llamay.types import FinishEvent, SamplingParams, StopSpec, TokenEvent

FEW = (40, 41, 42, 43)  # the tokens the bias narrows output to
NARROW = tuple((t, 30.0) for t in FEW)


@pytest.fixture(scope="module")
def model(tiny_model_path: Path) -> Iterator[Model]:
    with Model(tiny_model_path) as m:
        yield m


@dataclass(frozen=True)
class Result:
    tokens: tuple[int, ...]
    logprobs: tuple[float | None, ...]
    tops: tuple[tuple[tuple[int, float], ...], ...]
    text: str
    reason: str
    drafted: int
    taken: int


class FixedCosts(CostFit):
    """A step's costs as given, not measured: how deep a sequence drafts then depends only
    on its tokens, not on how busy the machine is, so "some drafts were taken and some
    refused" holds on any machine. (Which drafts are fed never changes a token either way.)"""

    def add(self, rows: int, seconds: float) -> None:
        pass

    def costs(self) -> tuple[float, float] | None:
        return 1.0, 0.1  # a row costs a tenth of a one-row step: drafts go deep


def make_engine(
    model: Model, speculate: bool, n_ctx: int = 1024, drafter: DraftModel | None = None
) -> Engine:
    ctx = Context(model, ContextConfig(n_ctx=n_ctx, n_batch=256, n_seq_max=16))
    config = EngineConfig(concurrency=8, speculate=SpecConfig(enabled=speculate))
    engine = Engine(model, ctx, config, drafter=drafter)
    engine.speculator.fit = FixedCosts()  # before any request: the engine thread reads it per step
    return engine


def run(engine: Engine, req: GenerateRequest) -> Result:
    tokens, lps, tops, text = [], [], [], []
    for ev in iter_events(engine, req):
        if isinstance(ev, TokenEvent):
            tokens.append(ev.token)
            lps.append(ev.logprob)
            tops.append(tuple((t.token, t.logprob) for t in ev.top))
            text.append(ev.text)
        elif isinstance(ev, FinishEvent):
            text.append(ev.text)
            x = ev.extra
            return Result(
                tuple(tokens),
                tuple(lps),
                tuple(tops),
                "".join(text),
                ev.reason,
                x["draft_tokens"],
                x["draft_accepted_tokens"],
            )
    raise AssertionError("no finish event")


def run_together(engine: Engine, reqs: list[GenerateRequest]) -> list[Result]:
    out: list[Result | None] = [None] * len(reqs)
    start = threading.Barrier(len(reqs))

    def one(i: int) -> None:
        start.wait()
        out[i] = run(engine, reqs[i])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(reqs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r is not None for r in out)
    return out  # type: ignore[return-value]


def together_matches_alone_without_speculation(model: Model, reqs: list[GenerateRequest]) -> None:
    """`reqs` run together with speculation give what each gives alone without it, bitwise,
    and speculation both took drafts and refused some (so both paths were exercised)."""
    off = make_engine(model, speculate=False)
    try:
        want = [run(off, r) for r in reqs]
    finally:
        off.close()
    on = make_engine(model, speculate=True)
    try:
        got = run_together(on, reqs)
    finally:
        on.close()
    for g, w in zip(got, want, strict=True):
        assert (g.tokens, g.logprobs, g.text) == (w.tokens, w.logprobs, w.text)
    assert sum(g.taken for g in got) > 0 and any(g.taken < g.drafted for g in got)


def request(model: Model, text: str, n: int = 80, **sampling: object) -> GenerateRequest:
    params = SamplingParams(**{"temperature": 0.0, "logit_bias": NARROW, **sampling})  # type: ignore[arg-type]
    return GenerateRequest(model.tokenize(text, add_special=False), params, StopSpec(max_tokens=n))


def cases(model: Model) -> dict[str, GenerateRequest]:
    schema = {
        "type": "object",
        "properties": {"colour": {"enum": ["red", "green"]}, "size": {"enum": ["small", "large"]}},
        "required": ["colour", "size"],
    }
    plan = ConstraintPlan(grammar=Grammar.from_json_schema(schema, layout="compact"))
    return {
        "greedy": request(model, "The little dog ran to the house"),
        "seeded": request(model, "A cat sat", temperature=0.7, seed=11, logprobs=True, top_logprobs=3),
        "top-k-top-p": request(
            model, "A cat sat on", temperature=0.9, seed=5, top_k=3, top_p=0.9, min_p=0.05
        ),
        "bias-ban": request(
            model, "Red green blue", temperature=0.8, seed=2, logit_bias=(*NARROW[:3], (43, float("-inf")))
        ),
        "penalties": request(
            model,
            "One two",
            temperature=0.6,
            seed=9,
            repeat_penalty=1.1,
            frequency_penalty=0.2,
            presence_penalty=0.1,
        ),
        "dry": request(model, "Tick tock", temperature=0.6, seed=4, dry_multiplier=0.8, dry_allowed_length=3),
        "mirostat": request(model, "Once upon", temperature=0.8, seed=8, mirostat=2),
        "schema": GenerateRequest(
            model.tokenize("Describe it", add_special=False),
            SamplingParams(temperature=0.0),
            StopSpec(max_tokens=40),
            constraint=plan,
        ),
        "max-tokens": request(model, "Count with me", n=7),
    }


@pytest.fixture(scope="module")
def plain(model: Model) -> dict[str, Result]:
    """Every case on an engine without speculation, one at a time."""
    engine = make_engine(model, speculate=False)
    try:
        return {name: run(engine, req) for name, req in cases(model).items()}
    finally:
        engine.close()


def check_same(got: Result, want: Result, name: str) -> None:
    assert got.tokens == want.tokens, name
    assert got.logprobs == want.logprobs, name
    assert got.tops == want.tops, name
    assert (got.text, got.reason) == (want.text, want.reason), name
    assert want.drafted == 0


def test_alone_every_case_is_bitwise_the_same(model: Model, plain: dict[str, Result]) -> None:
    engine = make_engine(model, speculate=True)
    try:
        got = {name: run(engine, req) for name, req in cases(model).items()}
    finally:
        engine.close()
    for name, result in got.items():
        check_same(result, plain[name], name)
    # Speculation ran: guesses were taken, and refused (their KV dropped), on the draws.
    assert got["greedy"].taken > 0
    for name in ("seeded", "top-k-top-p", "penalties", "dry"):
        assert 0 < got[name].taken < got[name].drafted, (name, got[name])
    assert got["schema"].taken > 0  # the keys the grammar forces
    assert got["max-tokens"].drafted <= 6  # never a row past max_tokens


def test_batched_every_case_is_bitwise_the_same(model: Model, plain: dict[str, Result]) -> None:
    engine = make_engine(model, speculate=True)
    try:
        all_cases = cases(model)
        got = run_together(engine, list(all_cases.values()))
    finally:
        engine.close()
    for (name, _), result in zip(all_cases.items(), got, strict=True):
        check_same(result, plain[name], name)
    assert sum(r.taken for r in got) > 0


def test_stop_strings_end_where_they_end_without_speculation(model: Model, plain: dict[str, Result]) -> None:
    base = plain["seeded"]
    stop = base.text[25:28]  # a string the output reaches partway
    assert stop and stop in base.text
    req = cases(model)["seeded"]
    req = replace(req, stop=StopSpec(max_tokens=80, stop=(stop,)))
    results = []
    for on in (False, True):
        engine = make_engine(model, speculate=on)
        try:
            results.append(run(engine, req))
        finally:
            engine.close()
    off, on_ = results
    assert off.reason == "stop" and stop not in off.text
    assert (on_.tokens, on_.logprobs, on_.text, on_.reason) == (
        off.tokens,
        off.logprobs,
        off.text,
        off.reason,
    )


def test_drafts_stop_at_the_end_of_the_context(model: Model) -> None:
    prompt = "The little dog ran to the house"
    n_prompt = len(model.tokenize(prompt, add_special=False))
    req = request(model, prompt, n=500)
    results, sizes = [], []
    for on in (False, True):
        engine = make_engine(model, speculate=on, n_ctx=n_prompt + 40)  # llama.cpp rounds it up
        sizes.append(engine.n_ctx)
        try:
            results.append(run(engine, req))
        finally:
            engine.close()
    off, on_ = results
    assert sizes[0] == sizes[1] < n_prompt + 500
    assert off.reason == "length" and len(off.tokens) == sizes[0] - n_prompt
    assert (on_.tokens, on_.reason) == (off.tokens, off.reason)
    assert on_.taken > 0


def test_speculation_counters(model: Model) -> None:
    engine = make_engine(model, speculate=True)
    try:
        r = run(engine, request(model, "The little dog ran to the house"))
        assert (engine.speculator.drafted, engine.speculator.accepted) == (r.drafted, r.taken)
    finally:
        engine.close()


def test_a_draft_model_guesses_where_lookup_has_nothing(model: Model, tiny_model_path: Path) -> None:
    """The target itself as its own draft model: its greedy guesses are always taken at
    temperature 0 (where unbiased random weights repeat nothing for lookup to find), and a
    seeded draw takes some and refuses others; either way nothing changes."""
    reqs = [
        GenerateRequest(
            model.tokenize("The little dog ran", add_special=False),
            SamplingParams(temperature=0.0),
            StopSpec(max_tokens=40),
        ),
        GenerateRequest(
            model.tokenize("A cat sat", add_special=False),
            SamplingParams(temperature=0.7, seed=3, logprobs=True),
            StopSpec(max_tokens=40),
        ),
    ]
    off = make_engine(model, speculate=False)
    try:
        want = [run(off, r) for r in reqs]
    finally:
        off.close()
    draft = Model(tiny_model_path)
    drafter = DraftModel(draft, Context(draft, ContextConfig(n_ctx=1024, n_batch=256, n_seq_max=16)))
    on = make_engine(model, speculate=True, drafter=drafter)
    try:
        got = [run(on, r) for r in reqs] + run_together(on, reqs)
    finally:
        on.close()
    for g, w in zip(got, want + want, strict=True):
        assert (g.tokens, g.logprobs, g.text, g.reason) == (w.tokens, w.logprobs, w.text, w.reason)
    assert got[0].taken == got[0].drafted > 0  # its own greedy guesses
    assert 0 < got[1].taken < got[1].drafted


def test_sliding_window_models_too(tmp_path: Path) -> None:
    """Gemma 3's window layers keep a second KV cache: dropping refused drafts from it keeps
    every later position as plain decoding computes it (the window, 16, is passed many times)."""
    from llamay.testing.tiny_swa import write_tiny_gemma3

    with Model(write_tiny_gemma3(tmp_path / "tiny-gemma3.gguf")) as swa:
        # This model's logits are steep: only a high temperature makes its draws vary.
        reqs = [request(swa, "one two three", n=90, temperature=30.0, seed=s) for s in (1, 2)]
        reqs.append(request(swa, "one two three", n=90))
        together_matches_alone_without_speculation(swa, reqs)

"""Speculative decoding on the real default model, which copies by itself: extracting from a
note and quoting a passage, greedy and seeded, alone and four at once, give bitwise the tokens
and log-probabilities of decoding without speculation, and most of the guesses are taken."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from llamay.backend.context import Context, ContextConfig
from llamay.backend.model import Model
from llamay.engine.client import iter_events
from llamay.engine.engine import Engine, EngineConfig
from llamay.engine.request import GenerateRequest
from llamay.engine.speculate import SpecConfig
from llamay.store import ModelStore
from llamay.types import FinishEvent, SamplingParams, StopSpec, TokenEvent

pytestmark = pytest.mark.slow

NOTE = (
    "Discharge note. Patient: Maria Lopez, 67. Admitted for community-acquired pneumonia. "
    "Medications on discharge: amoxicillin 500 mg three times daily for 5 days, "
    "paracetamol 1 g as needed up to four times daily, ramipril 5 mg once daily. "
    "Follow-up: GP in one week; chest X-ray in six weeks."
)
PROMPTS = [
    f"<|im_start|>user\nCopy the medication list from this note, word for word.\n\n{NOTE}<|im_end|>\n"
    "<|im_start|>assistant\nMedications on discharge:",
    f"<|im_start|>user\nQuote the note below exactly.\n\n{NOTE}<|im_end|>\n<|im_start|>assistant\n",
]


@pytest.fixture(scope="module")
def model() -> Iterator[Model]:
    with Model(ModelStore().resolve(None).path) as m:
        yield m


def engine(model: Model, on: bool) -> Engine:
    ctx = Context(model, ContextConfig(n_ctx=2048, n_batch=256, n_seq_max=8))
    return Engine(model, ctx, EngineConfig(concurrency=4, speculate=SpecConfig(enabled=on)))


def run(e: Engine, req: GenerateRequest) -> tuple[tuple[int, ...], tuple[float | None, ...], int, int]:
    tokens, lps = [], []
    for ev in iter_events(e, req):
        if isinstance(ev, TokenEvent):
            tokens.append(ev.token)
            lps.append(ev.logprob)
        elif isinstance(ev, FinishEvent):
            return tuple(tokens), tuple(lps), ev.extra["draft_tokens"], ev.extra["draft_accepted_tokens"]
    raise AssertionError("no finish")


def requests(model: Model) -> list[GenerateRequest]:
    out = []
    for prompt in PROMPTS:
        tokens = model.tokenize(prompt, add_special=False)
        for params in (
            SamplingParams(temperature=0, logprobs=True),
            SamplingParams(temperature=0.7, seed=3, logprobs=True),
        ):
            out.append(GenerateRequest(tokens, params, StopSpec(max_tokens=96)))
    return out


def test_copying_is_faster_in_steps_and_the_same_in_tokens(model: Model) -> None:
    reqs = requests(model)
    off = engine(model, False)
    try:
        want = [run(off, r)[:2] for r in reqs]
    finally:
        off.close()
    on = engine(model, True)
    try:
        alone = [run(on, r) for r in reqs]
        together: list[tuple[tuple[int, ...], tuple[float | None, ...], int, int] | None] = [None] * len(reqs)

        def one(i: int) -> None:
            together[i] = run(on, reqs[i])

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(reqs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        on.close()
    assert [a[:2] for a in alone] == want
    assert [t[:2] for t in together if t is not None] == want
    drafted = sum(a[2] for a in alone)
    taken = sum(a[3] for a in alone)
    assert taken > drafted / 2, (taken, drafted)  # a model that copies takes most guesses

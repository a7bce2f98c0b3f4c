"""The engine on the real llama.cpp backend with a tiny generated model, without HTTP."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from llamay.backend.context import Context, ContextConfig
from llamay.backend.model import Model
from llamay.engine.client import iter_events
from llamay.engine.engine import Engine, EngineConfig
from llamay.engine.request import GenerateRequest
from llamay.errors import ContextOverflow, InvalidRequest, Overloaded
from llamay.types import FinishEvent, SamplingParams, StopSpec, TokenEvent

BAN_EOG = ((0, float("-inf")), (1, float("-inf")), (2, float("-inf")))


@pytest.fixture(scope="module")
def model(tiny_model_path: Path) -> Iterator[Model]:
    with Model(tiny_model_path) as m:
        yield m


def make_engine(model: Model, n_ctx: int = 1024, concurrency: int = 4, max_queue: int = 16) -> Engine:
    ctx = Context(model, ContextConfig(n_ctx=n_ctx, n_batch=256, n_seq_max=2 * concurrency))
    return Engine(model, ctx, EngineConfig(concurrency=concurrency, max_queue=max_queue))


def run(engine: Engine, req: GenerateRequest) -> tuple[list[int], FinishEvent]:
    tokens: list[int] = []
    for ev in iter_events(engine, req):
        if isinstance(ev, TokenEvent):
            tokens.append(ev.token)
        elif isinstance(ev, FinishEvent):
            return tokens, ev
    raise AssertionError("no finish event")


def wait_kv_empty(engine: Engine, timeout: float = 5.0) -> int:
    """KV use is measured by the engine thread after each step; give it that step."""
    deadline = time.monotonic() + timeout
    while engine.kv_used() and time.monotonic() < deadline:
        time.sleep(0.01)
    return engine.kv_used()


def greedy(tokens: list[int], n: int) -> GenerateRequest:
    return GenerateRequest(tokens, SamplingParams(temperature=0, logit_bias=BAN_EOG), StopSpec(max_tokens=n))


def test_greedy_output_does_not_depend_on_batch_neighbours(model: Model) -> None:
    engine = make_engine(model, concurrency=8)
    try:
        prompt = model.tokenize("The little dog ran to the house", add_special=False)
        alone, _ = run(engine, greedy(prompt, 40))
        results: dict[int, list[int]] = {}

        def worker(i: int) -> None:
            p = prompt if i == 0 else model.tokenize(f"Story number {i}: once there was", add_special=False)
            results[i] = run(engine, greedy(p, 40 + 5 * i))[0]

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results[0] == alone
        assert len({tuple(v[:40]) for v in results.values()}) > 1
    finally:
        engine.close()


def test_kv_pressure_ends_requests_cleanly_and_engine_survives(model: Model) -> None:
    engine = make_engine(model, n_ctx=256, concurrency=4)
    try:
        finishes: list[FinishEvent] = []
        lock = threading.Lock()

        def worker(i: int) -> None:
            p = model.tokenize(f"Request {i} asks a long question about the weather", add_special=False)
            _, fin = run(engine, greedy(p, 200))
            with lock:
                finishes.append(fin)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert len(finishes) == 4
        assert all(f.reason == "length" for f in finishes)
        assert sum(f.usage.prompt_tokens + f.usage.completion_tokens for f in finishes) > engine.n_ctx
        # Nothing leaked, and the engine still answers.
        tokens, fin = run(engine, greedy(model.tokenize("hello", add_special=False), 5))
        assert len(tokens) == 5 and fin.reason == "length"
        assert wait_kv_empty(engine) == 0
    finally:
        engine.close()


def test_submit_rejects_what_can_never_run(model: Model) -> None:
    engine = make_engine(model, n_ctx=256)
    try:
        with pytest.raises(InvalidRequest):
            engine.submit(GenerateRequest([]), lambda ev: None)
        with pytest.raises(InvalidRequest):
            engine.submit(GenerateRequest([model.n_vocab + 5]), lambda ev: None)
        with pytest.raises(ContextOverflow):
            engine.submit(GenerateRequest([5] * 300), lambda ev: None)
    finally:
        engine.close()


def test_queue_bound(model: Model) -> None:
    engine = make_engine(model, concurrency=1, max_queue=2)
    try:
        handles = []
        with pytest.raises(Overloaded):
            for _ in range(10):
                handles.append(engine.submit(greedy([5, 6, 7], 500), lambda ev: None))
        assert 2 <= len(handles) <= 3
        for h in handles:
            h.abort()
    finally:
        engine.close()


def test_abort_frees_kv_within_a_step(model: Model) -> None:
    engine = make_engine(model)
    try:
        got = threading.Event()
        done = threading.Event()
        events: list[object] = []

        def sink(ev: object) -> None:
            events.append(ev)
            if isinstance(ev, TokenEvent) and len(events) >= 3:
                got.set()
            if isinstance(ev, FinishEvent):
                done.set()

        handle = engine.submit(greedy([5, 6, 7, 8], 900), sink)
        assert got.wait(10)
        handle.abort()
        assert done.wait(5)
        fin = events[-1]
        assert isinstance(fin, FinishEvent) and fin.reason == "abort"
        assert fin.usage.completion_tokens < 900
        assert wait_kv_empty(engine) == 0
    finally:
        engine.close()


def test_close_finishes_waiting_and_running(model: Model) -> None:
    engine = make_engine(model, concurrency=1)
    finishes: list[FinishEvent] = []
    for _ in range(3):
        engine.submit(
            greedy([5, 6, 7], 2000), lambda ev: finishes.append(ev) if isinstance(ev, FinishEvent) else None
        )
    engine.close()
    assert len(finishes) == 3 and all(f.reason == "abort" for f in finishes)


def test_greedy_equals_llama_cpp_pythons_own_generation(tiny_model_path: Path, model: Model) -> None:
    """The engine's batched greedy path gives exactly the tokens of llama-cpp-python's own
    high-level generation on the same prompt tokens (the reference implementation)."""
    from llama_cpp import Llama

    prompt = model.tokenize("The little dog ran to the house and", add_special=False)
    ref = Llama(str(tiny_model_path), n_ctx=512, n_batch=256, verbose=False, logits_all=False)
    expected = []
    for tok in ref.generate(prompt, temp=0.0, top_k=1, repeat_penalty=1.0):
        if len(expected) == 30:
            break
        expected.append(int(tok))
    ref.close()
    engine = make_engine(model)
    try:
        got, _ = run(engine, GenerateRequest(prompt, SamplingParams(temperature=0), StopSpec(max_tokens=30)))
    finally:
        engine.close()
    assert got == expected

"""Fair share between tenants in the real engine (tiny model, no HTTP): who starts first,
who makes way, and each tenant's own queue limit. Assertions are about order and outcome."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from llamay.backend.context import Context, ContextConfig
from llamay.backend.model import Model
from llamay.engine.engine import Engine, EngineConfig
from llamay.engine.request import GenerateRequest
from llamay.errors import Overloaded, QueueLimit
from llamay.types import Event, FinishEvent, SamplingParams, StopSpec, TokenEvent

BAN_EOG = ((0, float("-inf")), (1, float("-inf")), (2, float("-inf")))


@pytest.fixture(scope="module")
def model(tiny_model_path: Path) -> Iterator[Model]:
    with Model(tiny_model_path) as m:
        yield m


def make_engine(
    model: Model, *, fair: bool = True, concurrency: int = 1, max_queue: int = 16, n_batch: int = 256
) -> Engine:
    ctx = Context(model, ContextConfig(n_ctx=4096, n_batch=n_batch, n_seq_max=4 * concurrency + 8))
    return Engine(model, ctx, EngineConfig(concurrency=concurrency, max_queue=max_queue, fair=fair))


def request(tokens: list[int], tenant: str, n: int = 24, weight: float = 1.0) -> GenerateRequest:
    sampling = SamplingParams(temperature=0, logit_bias=BAN_EOG)
    return GenerateRequest(list(tokens), sampling, StopSpec(max_tokens=n), tenant=tenant, weight=weight)


class Finishes:
    """Sinks that record which request finished in which order, and their tokens."""

    def __init__(self, expected: int) -> None:
        self.order: list[str] = []
        self.tokens: dict[str, list[int]] = {}
        self.reasons: dict[str, str] = {}
        self._left = expected
        self.done = threading.Event()
        self._lock = threading.Lock()

    def sink(self, name: str) -> Callable[[Event], None]:
        self.tokens[name] = []

        def on(ev: Event) -> None:
            if isinstance(ev, TokenEvent):
                self.tokens[name].append(ev.token)
            elif isinstance(ev, FinishEvent):
                with self._lock:
                    self.order.append(name)
                    self.reasons[name] = ev.reason
                    self._left -= 1
                    if not self._left:
                        self.done.set()

        return on


def prompts(model: Model, n: int, words: int = 8) -> list[list[int]]:
    return [
        model.tokenize(f"Note {i}: " + " ".join(["river stone"] * words), add_special=False) for i in range(n)
    ]


def flood_then_late(engine: Engine, model: Model) -> Finishes:
    """a queues six requests, then b two; with one seat, the order they finish is the order
    they started."""
    seen = Finishes(8)
    engine.submit_many([(request(p, "a"), seen.sink(f"a{i}")) for i, p in enumerate(prompts(model, 6))])
    engine.submit_many([(request(p, "b"), seen.sink(f"b{i}")) for i, p in enumerate(prompts(model, 2, 3))])
    assert seen.done.wait(300)
    return seen


def test_a_late_tenant_starts_ahead_of_an_earlier_tenants_backlog(model: Model) -> None:
    engine = make_engine(model)
    try:
        seen = flood_then_late(engine, model)
    finally:
        engine.close()
    last_b = max(seen.order.index("b0"), seen.order.index("b1"))
    assert last_b <= 3, seen.order  # b's two start among the first four, not after a's six
    assert set(seen.reasons.values()) == {"length"}
    # every token computed is counted, and for whom
    by = engine.stats.by_tenant
    assert set(by) == {"a", "b"} and sum(by.values()) == engine.stats.computed_tokens
    assert by["a"] > by["b"] > 0


def test_first_come_first_served_when_fairness_is_off(model: Model) -> None:
    engine = make_engine(model, fair=False)
    try:
        seen = flood_then_late(engine, model)
    finally:
        engine.close()
    assert seen.order == [f"a{i}" for i in range(6)] + ["b0", "b1"]


def test_a_tenant_with_nothing_running_takes_a_seat_from_a_prompt_still_being_read(model: Model) -> None:
    long_prompts = prompts(model, 3, words=300)  # read 32 positions a step: many steps each
    alone = make_engine(model, n_batch=32)
    try:
        solo = Finishes(1)
        alone.submit(request(long_prompts[0], "a", 12), solo.sink("a0"))
        assert solo.done.wait(300)
    finally:
        alone.close()
    engine = make_engine(model, concurrency=2, n_batch=32)
    try:
        seen = Finishes(4)
        engine.submit_many([(request(p, "a", 12), seen.sink(f"a{i}")) for i, p in enumerate(long_prompts)])
        engine.call(lambda: None).result()  # the loop turn that runs this call then admits a's
        assert engine.call(lambda: engine.running).result() == 2  # both seats are a's
        engine.submit(request(prompts(model, 1, 3)[0], "b", 4), seen.sink("b"))
        assert seen.done.wait(300)
    finally:
        engine.close()
    assert seen.order[0] == "b", seen.order  # b did not wait for a seat to free
    # a sequence that made way started again from what it had read: the same greedy output
    assert seen.tokens["a0"] == solo.tokens["a0"]
    assert set(seen.reasons.values()) == {"length"}


def test_each_tenant_has_its_own_queue_limit(model: Model) -> None:
    engine = make_engine(model, max_queue=4)
    sink = lambda ev: None  # noqa: E731
    try:
        long = prompts(model, 1)[0]
        handles = engine.submit_many([(request(long, "a", 2000), sink) for _ in range(4)])
        depth = engine.queue_depth
        with pytest.raises(QueueLimit) as refused:
            engine.submit_many([(request(long, "a"), sink) for _ in range(4)])
        assert (
            refused.value.status == 429
            and "'a' may have at most 4 sequences waiting" in refused.value.message
        )
        assert engine.queue_depth == depth  # all or none: nothing of the refused group was queued
        handles += engine.submit_many([(request(long, "b"), sink) for _ in range(4)])  # b is not refused
        # the single user's queue is the whole server's: full is a 503
        handles += engine.submit_many([(request(long, ""), sink) for _ in range(4)])
        with pytest.raises(Overloaded) as full:
            engine.submit(request(long, ""), sink)
        assert full.value.status == 503 and not isinstance(full.value, QueueLimit)
        # a request aborted while waiting no longer counts
        for h in handles[-4:]:
            h.abort()
        engine.submit(request(long, ""), sink).abort()
        for h in handles:
            h.abort()
    finally:
        engine.close()


def running_by_tenant(engine: Engine) -> Counter[str]:
    """The tenants of the running sequences, read on the engine thread after the admission
    pass that follows everything submitted so far."""
    engine.call(lambda: None).result()  # the loop turn that runs this call then admits
    return engine.call(lambda: Counter(s.request.tenant for s in engine._running)).result()


@pytest.mark.parametrize(("weight", "chats", "seats"), [(1.0, 3, 2), (3.0, 4, 3)])
def test_a_tenant_gets_its_share_of_the_seats_at_once_while_another_floods(
    model: Model, weight: float, chats: int, seats: int
) -> None:
    engine = make_engine(model, concurrency=4, n_batch=32)
    try:
        seen = Finishes(8 + chats)
        flood = [
            (request(p, "a", 12), seen.sink(f"a{i}")) for i, p in enumerate(prompts(model, 8, words=100))
        ]
        engine.submit_many(flood)
        assert running_by_tenant(engine) == {"a": 4}  # a alone: every seat
        short = prompts(model, chats, 3)
        engine.submit_many([(request(p, "b", 8, weight), seen.sink(f"b{i}")) for i, p in enumerate(short)])
        # b's requests start at once, up to b's weighted share of the four seats (2 of 4 at
        # weight 1 beside a's 1, 3 of 4 at weight 3), not one at a time as seats free
        assert running_by_tenant(engine) == {"a": 4 - seats, "b": seats}
        assert engine.queue_depth == 8 - (4 - seats) + chats - seats
        assert seen.done.wait(600)
    finally:
        engine.close()
    assert set(seen.reasons.values()) == {"length"}  # a lost nothing by making way


def saturate(model: Model, weights: dict[str, float]) -> dict[str, int]:
    """a and b each queue twelve long prompts of one shape (their own words, so nothing is
    shared); the tokens computed for each, counted when the eighth of the 24 ends, while
    both still have prompts waiting."""
    engine = make_engine(model, concurrency=4, n_batch=64)
    snapshot: dict[str, int] = {}
    left = {"a": 12, "b": 12}
    lock = threading.Lock()
    ended = threading.Event()
    try:

        def sink(tenant: str) -> Callable[[Event], None]:
            def on(ev: Event) -> None:
                if isinstance(ev, FinishEvent):
                    with lock:
                        left[tenant] -= 1
                        if sum(left.values()) == 16:  # on the engine thread: stats are current
                            snapshot.update(engine.stats.by_tenant)
                            snapshot["waiting"] = engine.queue_depth
                        if not sum(left.values()):
                            ended.set()

            return on

        words = {"a": "river stone", "b": "salt marsh"}
        items = []
        for t in ("a", "b"):
            for i in range(12):
                text = f"Note {i}: " + " ".join([words[t]] * 60)
                tokens = model.tokenize(text, add_special=False)
                items.append((request(tokens, t, 16, weights[t]), sink(t)))
        engine.submit_many(items)
        assert ended.wait(600)
    finally:
        engine.close()
    return snapshot


@pytest.mark.parametrize("weights", [{"a": 1.0, "b": 1.0}, {"a": 1.0, "b": 3.0}])
def test_backlogged_tenants_are_served_tokens_in_proportion_to_their_weights(
    model: Model, weights: dict[str, float]
) -> None:
    got = saturate(model, weights)
    assert got["waiting"] > 0
    share_b = got["b"] / (got["a"] + got["b"])
    want = weights["b"] / (weights["a"] + weights["b"])
    assert abs(share_b - want) <= 0.05, (got, want)

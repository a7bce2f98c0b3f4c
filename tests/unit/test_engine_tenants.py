"""The engine's books on tenants, without weights: queue limits, and when steps are kept
short for an interactive tenant."""

from __future__ import annotations

import pytest

from llamay.engine.request import GenerateRequest, Handle
from llamay.engine.tenants import INTERACTIVE_WINDOW, LIGHT_PROMPT, Tenants
from llamay.errors import Overloaded, QueueLimit


def queue(tenants: Tenants, tenant: str, n: int, prompt: int = 3) -> list[Handle]:
    handles = [Handle(GenerateRequest([1] * prompt, tenant=tenant)) for _ in range(n)]
    for h in handles:
        tenants.waiting.push(tenant, h, lambda ev: None)
    return handles


def test_each_tenant_is_refused_only_past_its_own_limit() -> None:
    t = Tenants(fair=True, max_queue=4)
    queue(t, "a", 3)
    t.check_room("a", 1, n_running=8)
    with pytest.raises(
        QueueLimit, match="'a' may have at most 4 sequences waiting.*3 are waiting and this request adds 2"
    ):
        t.check_room("a", 2, n_running=8)
    t.check_room("b", 4, n_running=8)  # a's queue is not b's
    with pytest.raises(QueueLimit):
        t.check_room("b", 5, n_running=8)


def test_aborted_sequences_do_not_count() -> None:
    t = Tenants(fair=True, max_queue=2)
    for h in queue(t, "a", 2):
        h.abort()
    t.check_room("a", 2, n_running=0)
    assert [h.aborted for h, _ in t.waiting.drop_aborted()] == [True, True] and not len(t.waiting)


def test_one_queue_for_everyone_is_a_503_when_full() -> None:
    fcfs = Tenants(fair=False, max_queue=2)
    assert fcfs.of(GenerateRequest([1], tenant="a")) == ""
    queue(fcfs, "", 2)
    with pytest.raises(Overloaded) as full:
        fcfs.check_room("", 1, n_running=3)
    assert full.value.status == 503 and not isinstance(full.value, QueueLimit)
    assert "the request queue is full (2 waiting, 3 running)" in full.value.message


def test_steps_stay_short_while_an_interactive_tenant_shares_the_engine() -> None:
    t = Tenants(fair=True, max_queue=64)
    queue(t, "a", 5)
    t.refresh([], now=0.0)
    sharing = t.sharing([], True, 40)
    assert sharing is not None and sharing.prompt_cap is None  # a alone: whole steps
    chat = queue(t, "b", 1)
    t.refresh([], now=1.0)
    sharing = t.sharing([], True, 40)
    assert sharing is not None and sharing.light == {"b"} and sharing.prompt_cap == 40
    t.waiting.pop("b")
    del chat
    t.refresh([], now=2.0)  # b between two chats: still short steps
    assert (s := t.sharing([], True, 40)) is not None and s.prompt_cap == 40 and not s.light
    t.refresh([], now=2.0 + INTERACTIVE_WINDOW + 1)  # b has not been back for a while
    assert (s := t.sharing([], True, 40)) is not None and s.prompt_cap is None
    queue(t, "b", 9)  # b is back with a backlog of its own: heavy beside heavy, whole steps
    t.refresh([], now=100.0)
    assert (s := t.sharing([], True, 40)) is not None and s.prompt_cap is None and not s.light
    assert Tenants(fair=False, max_queue=1).sharing([], True, 40) is None


def test_a_chat_client_with_a_few_turns_open_stays_light() -> None:
    t = Tenants(fair=True, max_queue=64, concurrency=8)
    queue(t, "a", 20, prompt=1000)  # a floods with documents
    queue(t, "b", 3, prompt=40)  # b's chats piled up while a step ran
    t.refresh([], now=0.0)
    s = t.sharing([], True, 40)
    assert s is not None and s.light == {"b"} and s.prompt_cap == 40  # still short steps
    queue(t, "b", 1, prompt=40)
    t.refresh([], now=1.0)
    assert (s := t.sharing([], True, 40)) is not None and s.light == {"b"}  # half the seats' worth
    queue(t, "b", 1, prompt=40)
    t.refresh([], now=2.0)  # more than half the seats' worth of short prompts: a flood, not a chat
    assert (s := t.sharing([], True, 40)) is not None and not s.light
    c = Tenants(fair=True, max_queue=64, concurrency=8)
    queue(c, "a", 20, prompt=1000)
    queue(c, "c", 1, prompt=LIGHT_PROMPT + 1)  # one long document is not a chat either
    c.refresh([], now=0.0)
    assert (s := c.sharing([], True, 40)) is not None and not s.light and s.prompt_cap is None

"""The response store's bounds and owner rule, over a stand-in for the context service that
records which contexts it was asked to delete."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from llamay.api.openai.responses_store import ResponseStore, StoredResponse, stored_size
from llamay.auth import Principal
from llamay.errors import Conflict, InvalidRequest, NotFound

ANN, BOB, ROOT = Principal("ann"), Principal("bob"), Principal("root", role="admin")


class Contexts:
    def __init__(self, busy: int = 0) -> None:
        self.deleted: list[str] = []
        self.busy = busy  # how many delete calls answer "in use" first

    async def delete(self, cid: str) -> None:
        if self.busy:
            self.busy -= 1
            raise Conflict("in use")
        if cid.startswith("gone"):
            raise NotFound("no such context")
        self.deleted.append(cid)


def rec(n: int, owner: str | None) -> StoredResponse:
    return StoredResponse(f"resp_{n}", owner, "m", {"id": f"resp_{n}"}, [], f"ctx_{n}")


def store(contexts: Contexts, cap: int = 5, per_owner: int = 3) -> ResponseStore:
    return ResponseStore(cast(Any, contexts), cap=cap, per_owner=per_owner)


def test_per_owner_then_global_bounds_evict_the_oldest_with_its_context() -> None:
    async def run() -> tuple[ResponseStore, Contexts]:
        ctx = Contexts()
        s = store(ctx)
        for n in range(4):  # ann's fourth pushes out ann's first
            await s.put(rec(n, "ann"))
        for n in range(4, 7):  # bob's three fill the store past 5: the oldest overall go
            await s.put(rec(n, "bob"))
        return s, ctx

    s, ctx = asyncio.run(run())
    assert ctx.deleted == ["ctx_0", "ctx_1"] and len(s) == 5
    with pytest.raises(NotFound):
        s.get("resp_1", ANN)
    assert s.get("resp_2", ANN).id == "resp_2"


def test_another_principal_sees_nothing_an_admin_sees_all() -> None:
    async def run() -> ResponseStore:
        s = store(Contexts())
        await s.put(rec(1, "ann"))
        return s

    s = asyncio.run(run())
    with pytest.raises(NotFound) as e:
        s.get("resp_1", BOB, param="previous_response_id")
    assert e.value.param == "previous_response_id"
    assert s.get("resp_1", ROOT).owner == "ann"
    with pytest.raises(NotFound):
        asyncio.run(s.delete("resp_1", BOB))


def test_a_context_in_use_is_deleted_once_free_and_a_gone_one_is_fine() -> None:
    async def run() -> Contexts:
        ctx = Contexts(busy=2)
        s = store(ctx)
        await s.drop_context("ctx_9", wait=2.0)
        await s.drop_context("gone_1")
        for _ in range(50):
            if ctx.deleted:
                break
            await asyncio.sleep(0.05)
        return ctx

    assert asyncio.run(run()).deleted == ["ctx_9"]


def test_close_deletes_every_stored_context() -> None:
    async def run() -> Contexts:
        ctx = Contexts()
        s = store(ctx)
        await s.put(rec(1, None))
        await s.put(rec(2, "bob"))
        await s.close()
        return ctx

    assert sorted(asyncio.run(run()).deleted) == ["ctx_1", "ctx_2"]


def sized(n: int, owner: str | None, size: int) -> StoredResponse:
    r = rec(n, owner)
    r.size = size
    return r


def test_byte_budgets_evict_the_owners_oldest_then_everyones() -> None:
    async def run() -> tuple[ResponseStore, Contexts]:
        ctx = Contexts()
        s = ResponseStore(cast(Any, ctx), bytes_per_owner=100, bytes_total=200)
        await s.put(sized(0, "ann", 60))
        await s.put(sized(1, "ann", 60))  # ann past 100: her first goes
        await s.put(sized(2, "bob", 90))
        await s.put(sized(3, "carl", 90))  # 60 + 90 + 90 past 200: the oldest overall (ann's) goes
        return s, ctx

    s, ctx = asyncio.run(run())
    assert ctx.deleted == ["ctx_0", "ctx_1"]
    assert s.bytes == 180 and len(s) == 2
    assert s.get("resp_2", BOB).id == "resp_2"
    with pytest.raises(NotFound):
        s.get("resp_1", ANN)


def test_a_record_over_the_budget_alone_is_kept_and_a_conversation_over_it_refused() -> None:
    async def run() -> ResponseStore:
        s = ResponseStore(cast(Any, Contexts()), bytes_per_owner=100)
        await s.put(sized(0, "ann", 50))
        await s.put(sized(1, "ann", 150))  # the new one stays; the older one makes room
        return s

    s = asyncio.run(run())
    assert len(s) == 1 and s.get("resp_1", ANN).size == 150
    s.check_size(100)
    with pytest.raises(InvalidRequest) as e:
        s.check_size(101)
    assert e.value.param == "input" and "at most 100" in e.value.message


def test_records_expire_after_the_ttl_with_their_contexts() -> None:
    now = [1000.0]

    async def run() -> tuple[ResponseStore, Contexts]:
        ctx = Contexts()
        s = ResponseStore(cast(Any, ctx), ttl=60.0, clock=lambda: now[0])
        await s.put(sized(0, "ann", 10))
        now[0] += 30
        await s.put(sized(1, "ann", 10))
        now[0] += 31  # the first is 61 s old, the second 31
        with pytest.raises(NotFound):
            s.get("resp_0", ANN)
        assert s.get("resp_1", ANN).id == "resp_1"
        await asyncio.gather(*s._tasks)  # the expired record's context is dropped in the background
        return s, ctx

    s, ctx = asyncio.run(run())
    assert ctx.deleted == ["ctx_0"] and len(s) == 1 and s.bytes == 10


def test_stored_size_counts_the_conversation_and_response_as_json() -> None:
    items = [{"id": "msg_1", "type": "message", "content": [{"type": "input_text", "text": "é" * 10}]}]
    small = stored_size(items, {"output": []})
    assert stored_size(items, {"output": ["x" * 1000]}) >= small + 1000
    assert small >= 20  # ten two-byte characters

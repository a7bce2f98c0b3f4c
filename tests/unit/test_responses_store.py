"""The response store's bounds and owner rule, over a stand-in for the context service that
records which contexts it was asked to delete."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from llamay.api.openai.responses_store import ResponseStore, StoredResponse
from llamay.auth import Principal
from llamay.errors import Conflict, NotFound

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


def test_items_are_found_by_their_owner_only_until_evicted() -> None:
    def with_items(n: int, owner: str | None) -> StoredResponse:
        item = {"id": f"msg_{n}", "type": "message", "role": "user", "content": []}
        out = {"id": f"out_{n}", "type": "message", "role": "assistant", "content": []}
        return StoredResponse(f"resp_{n}", owner, "m", {"id": f"resp_{n}", "output": [out]}, [item], None)

    async def run() -> ResponseStore:
        s = store(Contexts(), per_owner=2)
        await s.put(with_items(0, "ann"))
        assert s.item("ann", "msg_0") is not None and s.item("ann", "out_0") is not None
        assert s.item("bob", "msg_0") is None and s.item(None, "msg_0") is None
        await s.put(with_items(1, "ann"))
        await s.put(with_items(2, "ann"))  # ann's first goes, and its items with it
        return s

    s = asyncio.run(run())
    assert s.item("ann", "msg_0") is None and s.item("ann", "out_2") is not None

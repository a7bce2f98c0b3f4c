"""Stored responses: each record is a response object, the conversation it answered (as
input items) and the server-held context that holds its prompt and reply, so that a later
`previous_response_id` turn computes only its new tokens.

Records live in memory, bounded: at most MAX_PER_OWNER and `bytes_per_owner` bytes per
principal, MAX_STORED and `bytes_total` bytes in all (a record's size is its conversation
and response as JSON, `stored_size`), and each for `ttl` seconds. Storing past a bound
evicts the oldest records (of that principal first, never the one being stored) together
with their contexts; an expired record is gone at the next store or lookup. On shutdown the
contexts of stored responses are deleted, since their records do not outlive the process.
Event-loop only."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...auth import Principal
from ...chat.contexts import ContextService
from ...config import ServerLimits
from ...errors import Conflict, InvalidRequest, LlamayError, NotFound

__all__ = ["StoredResponse", "ResponseStore", "MAX_STORED", "MAX_PER_OWNER", "page", "stored_size"]

log = logging.getLogger("llamay.responses")
MAX_STORED = 512
MAX_PER_OWNER = 128
MAX_PAGE = 100
_DEFAULTS = ServerLimits()


@dataclass
class StoredResponse:
    """`items`: the conversation this response answered (earlier turns' input and output
    items, then its own input), as input_items lists them. `context_id`: the context
    holding this response's prompt and reply (None when none could be kept). `size`: its
    bytes as `stored_size` counts them; `stored_at`: when it was stored (the store's clock).
    `passages`: the results of the file searches in its conversation and output, by
    file_search_call item id, whether or not the items show them (a later turn's prompt
    holds them again)."""

    id: str
    owner: str | None
    model: str
    body: dict[str, Any]
    items: list[dict[str, Any]]
    context_id: str | None
    size: int = 0
    stored_at: float = 0.0
    passages: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def stored_size(
    items: list[dict[str, Any]], body: dict[str, Any], passages: dict[str, Any] | None = None
) -> int:
    """What a record keeps, in bytes: its conversation, response and passages as compact JSON. (Items
    shared with an earlier turn's record are counted in each: an upper bound.) CPU work on
    long conversations: call it off the event loop."""
    return len(json.dumps([items, body, passages or {}], ensure_ascii=False, separators=(",", ":")).encode())


def _items_of(rec: StoredResponse) -> list[dict[str, Any]]:
    """The items an `item_reference` may name in `rec`: its conversation and its output."""
    return [*rec.items, *rec.body.get("output", [])]


def visible(rec: StoredResponse, principal: Principal) -> bool:
    """Contexts' rule: the owner, an admin, or anyone for a record without an owner."""
    return principal.admin or rec.owner is None or rec.owner == principal.name


class ResponseStore:
    def __init__(
        self,
        contexts: ContextService,
        cap: int = MAX_STORED,
        per_owner: int = MAX_PER_OWNER,
        *,
        bytes_per_owner: int = _DEFAULTS.responses_per_key,
        bytes_total: int = _DEFAULTS.responses_total,
        ttl: float = _DEFAULTS.response_ttl,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.contexts = contexts
        self.cap = cap
        self.per_owner = per_owner
        self.bytes_per_owner = bytes_per_owner
        self.bytes_total = bytes_total
        self.ttl = ttl
        self.clock = clock
        self._records: OrderedDict[str, StoredResponse] = OrderedDict()  # oldest first
        self._owned: dict[str | None, int] = {}  # bytes kept per owner
        self._bytes = 0
        # (owner, item id) -> (the record holding it, the item), for `item_reference`
        self._items: dict[tuple[str | None, str], tuple[str, dict[str, Any]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._records)

    @property
    def bytes(self) -> int:
        """Bytes kept in all, as `stored_size` counts them."""
        return self._bytes

    def get(self, rid: str, principal: Principal, param: str | None = None) -> StoredResponse:
        """The record, if the principal may see it; NotFound otherwise (another principal's
        response is not found, as if it did not exist; neither is an expired one)."""
        self._expire()
        rec = self._records.get(rid)
        if rec is None or not visible(rec, principal):
            raise NotFound(f"response '{rid}' not found", param=param)
        return rec

    def item(self, owner: str | None, iid: str) -> dict[str, Any] | None:
        """The input or output item `iid` of one of `owner`'s stored responses (the most
        recently stored one that holds it), or None."""
        self._expire()
        found = self._items.get((owner, iid))
        return found[1] if found is not None else None

    def passages(self, owner: str | None, iid: str) -> list[dict[str, Any]] | None:
        """The passages the file search `iid` (an item of one of `owner`'s stored responses,
        as `item` finds it) found, or None."""
        found = self._items.get((owner, iid))
        rec = self._records.get(found[0]) if found is not None else None
        return rec.passages.get(iid) if rec is not None else None

    def check_size(self, size: int) -> None:
        """InvalidRequest when a conversation of `size` bytes could never be stored for one
        principal (asked before the turn runs)."""
        if size > self.bytes_per_owner:
            raise InvalidRequest(
                f"the conversation is {size} bytes; a stored response may keep at most "
                f"{self.bytes_per_owner} (send store: false, or a shorter input)",
                param="input",
            )

    async def put(self, rec: StoredResponse) -> None:
        self._expire()
        rec.stored_at = self.clock()
        self._records[rec.id] = rec
        for it in _items_of(rec):
            if isinstance(it.get("id"), str):
                self._items[(rec.owner, it["id"])] = (rec.id, it)
        self._bytes += rec.size
        self._owned[rec.owner] = self._owned.get(rec.owner, 0) + rec.size
        mine = [r for r in self._records.values() if r.owner == rec.owner and r is not rec]
        count = len(mine) + 1
        while mine and (count > self.per_owner or self._owned.get(rec.owner, 0) > self.bytes_per_owner):
            await self._evict(mine.pop(0))
            count -= 1
        while len(self._records) > 1 and (len(self._records) > self.cap or self._bytes > self.bytes_total):
            oldest = next(iter(self._records.values()))
            if oldest is rec:
                break
            await self._evict(oldest)

    def _expire(self) -> None:
        """Drop the records stored more than `ttl` ago (oldest first: the order they are kept in)."""
        horizon = self.clock() - self.ttl
        while self._records:
            oldest = next(iter(self._records.values()))
            if oldest.stored_at > horizon:
                return
            self._forget(oldest)
            if oldest.context_id is not None:
                self.later(self.drop_context(oldest.context_id))

    def _forget(self, rec: StoredResponse) -> None:
        if self._records.pop(rec.id, None) is None:
            return
        for it in _items_of(rec):
            key = (rec.owner, str(it.get("id")))
            held = self._items.get(key)
            if held is not None and held[0] == rec.id:
                del self._items[key]
        self._bytes -= rec.size
        left = self._owned.get(rec.owner, 0) - rec.size
        if left > 0:
            self._owned[rec.owner] = left
        else:
            self._owned.pop(rec.owner, None)

    async def delete(self, rid: str, principal: Principal) -> None:
        await self._evict(self.get(rid, principal))

    async def _evict(self, rec: StoredResponse) -> None:
        self._forget(rec)
        if rec.context_id is not None:
            await self.drop_context(rec.context_id)

    async def drop_context(self, cid: str, *, wait: float = 5.0) -> None:
        """Delete context `cid`, best effort: gone already is fine; in use (a request on it
        is still being aborted) is retried for up to `wait` seconds in the background."""
        try:
            await self.contexts.delete(cid)
        except NotFound:
            return
        except Conflict:
            self.later(self._retry_drop(cid, wait))
        except LlamayError as exc:  # a context that cannot be freed must not fail the request
            log.warning("could not delete context %s: %s", cid, exc.message)

    def later(self, coro: Any) -> None:
        """Run `coro` in the background, holding a reference until it ends."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _retry_drop(self, cid: str, wait: float) -> None:
        for _ in range(int(wait / 0.1)):
            await asyncio.sleep(0.1)
            try:
                await self.contexts.delete(cid)
                return
            except Conflict:
                continue
            except LlamayError:
                return
        log.warning("context %s stayed in use; left in place", cid)

    async def close(self) -> None:
        """Delete every stored response's context (the records end with the process)."""
        for task in list(self._tasks):
            task.cancel()
        for rec in list(self._records.values()):
            await self._evict(rec)


def page(
    items: list[dict[str, Any]], *, limit: str | None, order: str | None, after: str | None
) -> dict[str, Any]:
    """A list object of `items` (oldest first) as OpenAI pages them: `order` "desc" (the
    default) or "asc", at most `limit` (1 to 100, default 20) after the item id `after`."""
    n = 20
    if limit is not None:
        if not limit.isdigit() or not 1 <= int(limit) <= MAX_PAGE:
            raise InvalidRequest(f"'limit' must be an integer from 1 to {MAX_PAGE}", param="limit")
        n = int(limit)
    order = order or "desc"
    if order not in ("asc", "desc"):
        raise InvalidRequest("'order' must be asc or desc", param="order")
    ordered = items if order == "asc" else items[::-1]
    start = 0
    if after is not None:
        at = next((i for i, item in enumerate(ordered) if item.get("id") == after), None)
        if at is None:
            raise InvalidRequest(f"'after' names no item of this response ({after!r})", param="after")
        start = at + 1
    data = ordered[start : start + n]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": start + n < len(ordered),
    }

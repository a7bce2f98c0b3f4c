"""Stored responses: each record is a response object, the conversation it answered (as
input items) and the server-held context that holds its prompt and reply, so that a later
`previous_response_id` turn computes only its new tokens.

Records live in memory for the server's lifetime, bounded: at most MAX_PER_OWNER per
principal and MAX_STORED in all; storing past a bound evicts the oldest record (of that
principal first) together with its context. On shutdown the contexts of stored responses
are deleted, since their records do not outlive the process. Event-loop only."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from ...auth import Principal
from ...chat.contexts import ContextService
from ...errors import Conflict, InvalidRequest, LlamayError, NotFound

__all__ = ["StoredResponse", "ResponseStore", "MAX_STORED", "MAX_PER_OWNER", "page"]

log = logging.getLogger("llamay.responses")
MAX_STORED = 512
MAX_PER_OWNER = 128
MAX_PAGE = 100


@dataclass
class StoredResponse:
    """`items`: the conversation this response answered (earlier turns' input and output
    items, then its own input), as input_items lists them. `context_id`: the context
    holding this response's prompt and reply (None when none could be kept)."""

    id: str
    owner: str | None
    model: str
    body: dict[str, Any]
    items: list[dict[str, Any]]
    context_id: str | None


def visible(rec: StoredResponse, principal: Principal) -> bool:
    """Contexts' rule: the owner, an admin, or anyone for a record without an owner."""
    return principal.admin or rec.owner is None or rec.owner == principal.name


class ResponseStore:
    def __init__(
        self, contexts: ContextService, cap: int = MAX_STORED, per_owner: int = MAX_PER_OWNER
    ) -> None:
        self.contexts = contexts
        self.cap = cap
        self.per_owner = per_owner
        self._records: OrderedDict[str, StoredResponse] = OrderedDict()
        # (owner, item id) -> (the record holding it, the item), for `item_reference`
        self._items: dict[tuple[str | None, str], tuple[str, dict[str, Any]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._records)

    def get(self, rid: str, principal: Principal, param: str | None = None) -> StoredResponse:
        """The record, if the principal may see it; NotFound otherwise (another principal's
        response is not found, as if it did not exist)."""
        rec = self._records.get(rid)
        if rec is None or not visible(rec, principal):
            raise NotFound(f"response '{rid}' not found", param=param)
        return rec

    def item(self, owner: str | None, iid: str) -> dict[str, Any] | None:
        """The input or output item `iid` of one of `owner`'s stored responses (the most
        recently stored one that holds it), or None."""
        found = self._items.get((owner, iid))
        return found[1] if found is not None else None

    async def put(self, rec: StoredResponse) -> None:
        self._records[rec.id] = rec
        for it in [*rec.items, *rec.body.get("output", [])]:
            if isinstance(it.get("id"), str):
                self._items[(rec.owner, it["id"])] = (rec.id, it)
        mine = [r for r in self._records.values() if r.owner == rec.owner]
        while len(mine) > self.per_owner:
            await self._evict(mine.pop(0))
        while len(self._records) > self.cap:
            await self._evict(next(iter(self._records.values())))

    async def delete(self, rid: str, principal: Principal) -> None:
        await self._evict(self.get(rid, principal))

    async def _evict(self, rec: StoredResponse) -> None:
        self._records.pop(rec.id, None)
        for it in [*rec.items, *rec.body.get("output", [])]:
            key = (rec.owner, str(it.get("id")))
            held = self._items.get(key)
            if held is not None and held[0] == rec.id:
                del self._items[key]
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

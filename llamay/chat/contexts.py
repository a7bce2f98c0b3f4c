"""Server-held contexts as a typed async service over every loaded model: what the HTTP
routes and the Python library use, instead of running code on engine threads themselves.

Each call runs one operation of the model's KV manager on that model's engine thread (the
only thread that touches its KV) and awaits the result; creating a context is a prefill
through the chat pipeline. Ownership is the caller's: pass a `check` that raises for a
principal who may not use a context.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from ..auth import CURRENT_NAMESPACE
from ..errors import EngineError, InvalidRequest, NotFound
from ..kv.contexts import ContextRecord
from ..kv.seqstate import StateFile
from ..kv.snapshot import SnapshotHeader, check_model
from ..types import SamplingParams
from .journal import record
from .pipeline import Held, NewContext, Prompt, RunSpec, start

if TYPE_CHECKING:
    from ..runtime import LoadedModel

__all__ = ["ContextService", "Check"]

T = TypeVar("T")
Check = Callable[[ContextRecord], None]


def _allow(rec: ContextRecord) -> None:
    return None


class ContextService:
    """Contexts of the models a runtime has loaded. `runtime` needs `models()` (the loaded
    models) and `use(name)` (load on demand)."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime

    @staticmethod
    async def _on_engine(lm: LoadedModel, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.wrap_future(lm.engine.call(lambda: fn(*args)))

    async def find(self, cid: str, check: Check = _allow) -> tuple[LoadedModel, ContextRecord]:
        """The model holding context `cid` and its record; NotFound, or what `check` raises."""
        for lm in self.runtime.models():
            rec = await self._on_engine(lm, lm.engine.kv.find, cid)
            if rec is not None:
                check(rec)
                return lm, rec
        raise NotFound(f"context '{cid}' not found", param="context")

    async def every(
        self, visible: Callable[[ContextRecord], bool]
    ) -> list[tuple[LoadedModel, ContextRecord]]:
        """Every context `visible` accepts, with its model."""
        out = []
        for lm in self.runtime.models():
            out += [(lm, r) for r in await self._on_engine(lm, lm.engine.kv.records) if visible(r)]
        return out

    async def held_by(self, owner: str) -> tuple[int, int, int]:
        """Contexts `owner` has on every loaded model, the bytes of KV they keep, and
        the largest bytes-per-position among the models (to price a new context)."""
        count = size = per_cell = 0
        for lm in self.runtime.models():
            n, b = await self._on_engine(lm, lm.engine.kv.held_by, owner)
            count, size = count + n, size + b
            per_cell = max(per_cell, await self._on_engine(lm, lm.engine.kv.bytes_per_cell))
        return count, size, per_cell

    async def create(
        self,
        lm: LoadedModel,
        tokens: list[int],
        *,
        owner: str | None = None,
        marking: str | None = None,
        shared: bool = False,
    ) -> str:
        """A new context holding `tokens` (computed now); its id. `shared` (the caller
        checked that an admin asks): its KV is a prefix every tenant may attach to."""
        if not tokens:
            raise InvalidRequest("the context would be empty", param="prompt")
        spec = RunSpec(sampling=SamplingParams(temperature=0), max_tokens=0)
        gen = await start(lm, Prompt(tokens), spec, new_context=NewContext(owner, marking, shared))
        (choice,) = await gen.collect()
        cid = choice.finish.extra.get("context_id")
        if not isinstance(cid, str):
            raise EngineError("the context could not be computed (the KV cache is full?)")
        return cid

    async def fork(self, cid: str, n: int, check: Check = _allow) -> tuple[LoadedModel, list[ContextRecord]]:
        """`n` new contexts holding what `cid` holds (sharing its KV)."""
        lm, _ = await self.find(cid, check)
        made = await self._on_engine(lm, lm.engine.kv.fork, cid, n)
        await record(*(r.id for r in made))
        return lm, made

    async def delete(self, cid: str, check: Check = _allow) -> None:
        lm, _ = await self.find(cid, check)
        await self._on_engine(lm, lm.engine.kv.delete, cid)
        await record(cid)

    async def snapshot(
        self, cid: str, check: Check = _allow, key: bytes | None = None
    ) -> tuple[ContextRecord, bytes]:
        """Context `cid` in the snapshot file format (signed with `key`, if given)."""
        lm, rec = await self.find(cid, check)
        return rec, await self._on_engine(lm, lm.engine.kv.snapshot, cid, key)

    async def restore(
        self,
        lm: LoadedModel,
        header: SnapshotHeader,
        state: bytes | StateFile,
        *,
        owner: str | None | Literal["header"] = "header",
        namespace: str | None = None,
        cid: str | None = None,
    ) -> ContextRecord:
        """A new context on `lm` (under a new id, or `cid`, which a fleet moving a context
        keeps: Conflict if taken) from a snapshot read with `kv.snapshot.read_snapshot` (or
        streamed to a `StateFile` by the restore route): the snapshot must be of this model
        and fit its context. It is owned by `owner` (by default the header's) in prefix-cache
        `namespace` (by default the current request's: never SHARED unless the caller decided
        the snapshot is trusted). A damaged state is InvalidRequest before anything in the
        cache gives way."""
        check_model(header, lm.name, lm.sha256 or "")
        lm.model.check_tokens(header.tokens)
        if len(header.tokens) >= lm.engine.n_ctx:
            raise InvalidRequest(
                f"the snapshot holds {len(header.tokens)} tokens; this context holds {lm.engine.n_ctx}"
            )
        kv = lm.engine.kv
        rec = await self._on_engine(
            lm,
            lambda: kv.restore(
                header,
                state,
                owner=header.owner if owner == "header" else owner,
                namespace=CURRENT_NAMESPACE.get() if namespace is None else namespace,
                check_state=kv.check_state,
                cid=cid,
            ),
        )
        await record(rec.id)
        return rec

    @asynccontextmanager
    async def reserve(self, lm: LoadedModel, cid: str, check: Check = _allow) -> AsyncIterator[Held]:
        """Reserve context `cid` (of model `lm`) for one request and yield what it holds.
        If the body of the `async with` fails before the engine took the request, the
        reservation is released; once submitted, the engine releases it at the end."""
        owner_lm, _ = await self.find(cid)
        if owner_lm is not lm:
            raise InvalidRequest(
                f"context '{cid}' belongs to model '{owner_lm.name}', not '{lm.name}'", param="model"
            )
        tokens = await self._on_engine(lm, lm.engine.kv.begin, cid, check)
        try:
            yield Held(cid, tokens)
        except BaseException:
            await self._on_engine(lm, lm.engine.kv.cancel, cid)
            raise

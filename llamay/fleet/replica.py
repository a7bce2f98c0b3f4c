"""A fleet replica: the whole llamay app (engine, model, contexts, auth) in one Ray Serve
replica. The ingress forwards HTTP requests here; the app answers them in process, unchanged.

Besides requests, a replica reports routing stats (its models, contexts and load), answers
status, checkpoints its contexts when the fleet has a state directory, and on a graceful stop
(scale-down, rolling update) hands its contexts to the ingress to move before it exits."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from .asgi import Forwarded, Head, Lifespan, call_asgi
from .checkpoint import Checkpoints
from .hints import RouteHint
from .spec import INGRESS_NAME, REPLICA_HEADER, FleetSpec

__all__ = ["LlamayReplica"]

log = logging.getLogger("llamay.fleet")
MAX_REPORTED_CONTEXTS = 20_000  # ids sent in routing stats; more are learned from responses


def _replica_id() -> tuple[str, str]:
    from ray import get_runtime_context, serve

    ctx = serve.get_replica_context()
    return ctx.replica_id.unique_id, get_runtime_context().get_node_id()


class LlamayReplica:
    """Ray Serve calls every public method with a `RouteHint` first, which our router reads."""

    def __init__(self, spec: FleetSpec) -> None:
        from ..api.state import state_of
        from ..server import build_server

        self.spec = spec
        self.uid, self.node = _replica_id()
        # Each replica has its own home (contexts, their lock): under the state directory
        # when there is one, so a replica's saved contexts outlive its process.
        if spec.state_dir:
            self.home = Path(spec.state_dir) / "replicas" / self.uid
            self.home.mkdir(parents=True, exist_ok=True)
        else:
            self.home = Path(tempfile.mkdtemp(prefix=f"llamay-replica-{self.uid}-"))
        # The same keys as the ingress's (they are in the config): auth is the replicas' own,
        # on every request.
        name, path, sha = spec.model
        self.app = build_server(spec.replica_config(self.home), model=(name, Path(path), sha))
        self.runtime = state_of(self.app).runtime
        self.lifespan = Lifespan(self.app)
        self._started = False
        self._ckpt_task: asyncio.Task[None] | None = None
        self._written: dict[str, int] = {}  # context id -> tokens in its last checkpoint
        root = spec.checkpoints()
        self.ckpt = Checkpoints(root, self.uid) if root is not None else None
        self.header = ((REPLICA_HEADER.encode(), self.uid.encode()),)
        log.info("replica ready", extra={"replica": self.uid, "pid": os.getpid()})

    async def _ensure_started(self) -> None:
        # The lifespan (idle-model reaper) and the checkpointer need the replica's event loop,
        # which __init__ does not run on.
        if self._started:
            return
        self._started = True
        await self.lifespan.start()
        if self.ckpt is not None:
            self.ckpt.heartbeat()
            self._ckpt_task = asyncio.create_task(self._checkpoint_loop())

    async def handle(self, hint: RouteHint, req: Forwarded) -> AsyncIterator[Head | bytes]:
        """The app's response to `req`: a `Head` (with the replica header added), then body
        chunks as the app produces them."""
        await self._ensure_started()
        async for item in call_asgi(self.app, req, self.header):
            yield item

    # -- what the router and `fleet status` read ---------------------------------------
    async def _contexts(self) -> list[tuple[str, str, int]]:
        from ..chat.contexts import ContextService

        found = await ContextService(self.runtime).every(lambda _r: True)
        return [(lm.name, r.id, len(r.tokens)) for lm, r in found]

    async def record_routing_stats(self) -> dict[str, Any]:
        await self._ensure_started()
        models = self.runtime.loaded()
        ctxs = await self._contexts()
        return {
            "models": [m.name for m in models],
            "contexts": [c for _, c, _ in ctxs[:MAX_REPORTED_CONTEXTS]],
            "load": sum(m.engine.running + m.engine.queue_depth for m in models),
        }

    async def status(self, hint: RouteHint) -> dict[str, Any]:
        """This replica's row of `fleet status`."""
        await self._ensure_started()
        ctxs = await self._contexts()
        return {
            "replica": self.uid,
            "node": self.node,
            "pid": os.getpid(),
            "models": [
                {
                    "name": m.name,
                    "running": m.engine.running,
                    "queued": m.engine.queue_depth,
                    "context": m.engine.n_ctx,
                    "kv_cells": m.engine.kv_used(),
                    "cache_cells": m.engine.cache_used(),
                }
                for m in self.runtime.loaded()
            ],
            "contexts": len(ctxs),
        }

    async def export_contexts(self, hint: RouteHint) -> list[tuple[str, bytes]]:
        """(id, snapshot) of every context here; the ones busy right now are skipped."""
        from ..chat.contexts import ContextService

        service = ContextService(self.runtime)
        out = []
        for _, cid, _ in await self._contexts():
            try:
                _, data = await service.snapshot(cid)
            except Exception:  # deleted or failed meanwhile: nothing to move
                continue
            out.append((cid, data))
        return out

    async def import_context(self, hint: RouteHint, data: bytes) -> tuple[str, str]:
        """Restore a snapshot here; (this replica, the new local id). Only the fleet calls
        this, with snapshots its own replicas wrote: the context keeps the owner and the
        prefix-cache namespace its header records, as it had before the move."""
        from ..chat.contexts import ContextService
        from ..kv.snapshot import read_snapshot

        await self._ensure_started()
        header, state = read_snapshot(data)
        lm = await self.runtime.use(header.model_name)
        namespace = getattr(header, "namespace", None) or ""
        rec = await ContextService(self.runtime).restore(lm, header, state, namespace=namespace)
        return self.uid, rec.id

    # -- checkpoints -------------------------------------------------------------------
    async def _checkpoint_loop(self) -> None:
        while True:
            await asyncio.sleep(self.spec.checkpoint_every)
            try:
                await self._checkpoint_pass()
            except Exception:
                log.exception("checkpoint pass failed")

    async def _checkpoint_pass(self) -> None:
        """Heartbeat, then write each context whose length changed since its last write
        and drop the checkpoints of contexts that are gone."""
        from ..chat.contexts import ContextService

        assert self.ckpt is not None
        service = ContextService(self.runtime)
        written = self._written
        self.ckpt.heartbeat()
        now = {cid: n for _, cid, n in await self._contexts()}
        for cid, n in now.items():
            if written.get(cid) == n:
                continue
            try:
                _, data = await service.snapshot(cid)
            except Exception:  # busy or gone: the next pass tries again
                continue
            await asyncio.to_thread(self.ckpt.write, cid, data)
            written[cid] = n
        for cid in set(written) - set(now):
            self.ckpt.remove(cid)
            del written[cid]

    async def _stop_checkpoints(self) -> None:
        task, self._ckpt_task = self._ckpt_task, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task})  # its pass is over before the folder is dropped

    # -- graceful stop -----------------------------------------------------------------
    async def no_drain(self, hint: RouteHint) -> None:
        """The whole fleet is going down: keep contexts here (home, checkpoints) on stop."""
        self._no_drain = True

    async def __del__(self) -> None:
        """Move this replica's contexts to the others through the ingress, then stop the app
        (which writes whatever stayed to this replica's home). A fleet going down entirely
        has nowhere to move them: they stay in the home and, with a state directory, in the
        checkpoints, which the next fleet on that directory restores."""
        moved = False
        keep = getattr(self, "_no_drain", False)
        try:
            if keep:  # the next fleet restores from checkpoints: make them current
                await self._stop_checkpoints()
                if self.ckpt is not None:
                    await self._checkpoint_pass()
            # While draining, the checkpointer keeps its heartbeat: a drain longer than
            # `stale_after` must not look like a death (its contexts restored twice).
            items = [] if keep else await self.export_contexts(RouteHint())
            if items:
                from ray import serve

                ingress = serve.get_deployment_handle(INGRESS_NAME, app_name=self.spec.app_name)
                done = await asyncio.wait_for(ingress.take_contexts.remote(self.uid, items), timeout=30)
                moved = done == len(items)
                log.info("drained contexts", extra={"replica": self.uid, "moved": done, "of": len(items)})
            elif not keep:
                moved = True
        except Exception:
            log.exception("draining contexts failed; they stay in this replica's home")
        await self._stop_checkpoints()
        if moved and self.ckpt is not None:
            self.ckpt.drop()
        with contextlib.suppress(Exception):
            await self.lifespan.stop()
        if not self._started:
            self.runtime.close()

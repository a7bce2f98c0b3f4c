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
from collections import OrderedDict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from .asgi import Forwarded, Head, Lifespan, call_asgi
from .checkpoint import Checkpoints
from .hints import RouteHint
from .spec import INGRESS_NAME, REPLICA_HEADER, FleetSpec
from .trust import private_dir, trusted_origin

__all__ = ["LlamayReplica"]

log = logging.getLogger("llamay.fleet")
MAX_REPORTED_CONTEXTS = 20_000  # ids sent in routing stats; more are learned from responses
# Prompt-prefix block hashes a replica reports as recently sent to it (most recent kept):
# every ingress's router reads them, so ingresses share where prefixes went, and one that
# starts again knows it within a stats period. 4,096 blocks of 128 bytes: ~0.5 MB of prompts.
MAX_REPORTED_PREFIXES = 4096


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
            private_dir(Path(spec.state_dir) / "replicas")
            self.home = private_dir(Path(spec.state_dir) / "replicas" / self.uid)
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
        # One snapshot-and-write at a time: a pass's older snapshot never lands after a
        # newer one a request made durable (`journal`).
        self._ckpt_lock = asyncio.Lock()
        self._prefixes: OrderedDict[int, None] = OrderedDict()
        root = spec.checkpoints()
        self.ckpt = Checkpoints(root, self.uid) if root is not None else None
        self.key = spec.signing_key()  # signs checkpoints and drained contexts; checks imports
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
        self._note_prefix(hint)
        journal = self.journal if self.ckpt is not None and self.spec.durable else None
        async for item in call_asgi(self.app, req, self.header, journal):
            yield item

    def _note_prefix(self, hint: RouteHint) -> None:
        for h in hint.prefix:
            self._prefixes[h] = None
            self._prefixes.move_to_end(h)
        while len(self._prefixes) > MAX_REPORTED_PREFIXES:
            self._prefixes.popitem(last=False)

    async def journal(self, cid: str) -> None:
        """Make context `cid` durable in this replica's checkpoints (written and synced to
        disk), or its checkpoint gone if the context is: what a request that changed it
        awaits before its answer says so (`chat.journal`). A failure is a 503: the client
        is told to retry, never that something a lost machine would take back succeeded."""
        from ..chat.contexts import ContextService
        from ..errors import NotFound, Overloaded

        assert self.ckpt is not None
        ckpt = self.ckpt
        async with self._ckpt_lock:
            try:
                rec, data = await ContextService(self.runtime).snapshot(cid, key=self.key)
            except NotFound:
                await asyncio.to_thread(ckpt.remove, cid)
                self._written.pop(cid, None)
                return
            try:
                await asyncio.to_thread(ckpt.write, cid, data, durable=True)
            except OSError as exc:
                log.error("a context could not be made durable", extra={"context": cid, "error": str(exc)})
                raise Overloaded(f"context '{cid}' could not be saved to the fleet's state; retry") from None
            self._written[cid] = len(rec.tokens)

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
            "prefixes": list(self._prefixes),
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
                _, data = await service.snapshot(cid, key=self.key)
            except Exception:  # deleted or failed meanwhile: nothing to move
                continue
            out.append((cid, data))
        return out

    async def import_context(self, hint: RouteHint, data: bytes, cid: str | None = None) -> tuple[str, str]:
        """Restore a snapshot here, under id `cid` when given (a moved context keeps its
        id: every ingress then finds it in this replica's reports); (this replica, its id
        here). Durable before it returns, when the fleet has a state directory. The fleet
        calls this with checkpoints and drained contexts, which its replicas sign with the
        fleet's key: such a context keeps the owner and prefix-cache namespace its header
        records, as it had before the move. Anything unsigned (a file put in the checkpoint
        folder) is restored as no tenant's (`trust.trusted_origin`)."""
        from ..chat.contexts import ContextService
        from ..chat.journal import record
        from ..kv.snapshot import read_signed

        await self._ensure_started()
        header, state, signed = read_signed(data, self.key)
        lm = await self.runtime.use(header.model_name)
        owner, namespace = trusted_origin(header, signed)
        rec = await ContextService(self.runtime).restore(
            lm, header, state, owner=owner, namespace=namespace, cid=cid
        )
        if self.ckpt is not None:  # outside a request, so no journal is set: write it here
            await record(rec.id, journal=self.journal)
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
        ckpt = self.ckpt
        service = ContextService(self.runtime)
        written = self._written
        ckpt.heartbeat()
        now = {cid: n for _, cid, n in await self._contexts()}
        for cid, n in now.items():
            if written.get(cid) == n:
                continue
            async with self._ckpt_lock:
                try:
                    rec, data = await service.snapshot(cid, key=self.key)
                except Exception:  # busy or gone: the next pass tries again
                    continue
                await asyncio.to_thread(ckpt.write, cid, data)
                written[cid] = len(rec.tokens)
        async with self._ckpt_lock:  # listed again: a context made meanwhile is kept
            here = {cid for _, cid, _ in await self._contexts()}
            for cid in set(written) - here:
                ckpt.remove(cid)
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

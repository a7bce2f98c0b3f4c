"""Bringing back the contexts of replicas that died, from their checkpoints.

Runs in every ingress when the fleet has a state directory; one at a time sweeps (a lock file
in the state directory), the others only note which ids are pending. Every `checkpoint_every`
seconds a sweep looks for checkpoint folders of replicas that are not live and silent for
`stale_after` (`checkpoint.orphans`), restores each context on a live replica under its own
id (durably: the new holder has checkpointed it before the old file goes), and removes the
folder. Every ingress then finds the context in its new holder's reports. Aliases (fleet id
-> replica, local id) of contexts moved by older versions, which gave a moved context a new
id, are still read from `<state>/aliases.json`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import shutil
from pathlib import Path
from typing import Any

from ..filelock import FileLock
from .checkpoint import SUFFIX, orphans, saved
from .hints import RouteHint
from .routing import FleetKnowledge
from .spec import FleetSpec
from .trust import write_private

__all__ = ["Recovery"]

log = logging.getLogger("llamay.fleet")
_FILE_SAFE = re.compile(r"[A-Za-z0-9_-]{1,64}")


class Recovery:
    def __init__(self, spec: FleetSpec, know: FleetKnowledge, replicas: Any) -> None:
        assert spec.state_dir is not None
        self.spec = spec
        self.know = know
        self.replicas = replicas
        self.root = Path(spec.state_dir) / "checkpoints"
        self.aliases = Path(spec.state_dir) / "aliases.json"
        self.homes = Path(spec.state_dir) / "replicas"
        self.lock = FileLock(Path(spec.state_dir) / "recovery.lock", mode=0o600)
        self.restored = 0
        self._pending: set[str] = set()
        self._load_aliases()
        # Before any replica is known live, every checkpointed id counts as pending: a
        # request for one of them then waits (503) instead of meeting a 404 in the seconds
        # before the first sweep. Ids a live replica holds are found there first.
        self._scan(set())

    def _load_aliases(self) -> None:
        try:
            data = json.loads(self.aliases.read_text())
        except (OSError, ValueError):
            return
        for fid, (uid, local) in data.items():
            self.know.learn(fid, uid, local)

    def save_aliases(self) -> None:
        write_private(self.aliases, json.dumps(self.know.aliases()).encode())

    async def run(self) -> None:
        # The first call through the handle is what makes Ray build our router here, and
        # with it the live set that tells a dead replica's folder from a live one's.
        while not self.know.live():
            with contextlib.suppress(Exception):
                await self.replicas.status.remote(RouteHint())
            await asyncio.sleep(0.5)
        while True:
            try:
                await self.sweep()
            except Exception:
                log.exception("context recovery pass failed")
            await asyncio.sleep(self.spec.checkpoint_every)

    def pending(self, fid: str) -> bool:
        """Whether `fid` is checkpointed by a replica that is not live and not yet restored
        (its requests get 503 + Retry-After until it is, rather than a 404)."""
        return fid in self._pending

    def waiting(self, fid: str) -> bool:
        """Whether a request for `fid`, found on no live replica, should wait (503 +
        Retry-After) rather than meet a 404: it is pending, or it was learned on a replica
        that is gone and whose checkpoints are not yet all restored. (Reads the state
        directory: call it off the event loop.)"""
        if self.pending(fid):
            return True
        found = self.know.learned(fid)
        if found is not None:
            return self.know.holder_lost(fid) and (self.root / found[0]).is_dir()
        # Unknown here (made through another ingress, not yet in any report) but checkpointed
        # by a replica that is not live: the next sweep brings it back.
        if not _FILE_SAFE.fullmatch(fid):  # a caller's string: never a path
            return False
        live = {v.uid for v in self.know.live()}
        return self.root.is_dir() and any(
            (d / f"{fid}{SUFFIX}").is_file() for d in self.root.iterdir() if d.is_dir() and d.name not in live
        )

    def _scan(self, live: set[str]) -> None:
        found: set[str] = set()
        if self.root.is_dir():
            for folder in self.root.iterdir():
                if folder.is_dir() and folder.name not in live:
                    found |= {self.know.fleet_id(folder.name, local) for local, _ in saved(folder)}
        self._pending = found

    async def sweep(self) -> int:
        """One pass, unless another ingress is sweeping; the number of contexts restored."""
        live = {v.uid for v in self.know.live()}
        if not live:
            return 0
        self._scan(live)
        if not self.lock.acquire(wait=False):
            return 0
        try:
            return await self._sweep(live)
        finally:
            self.lock.release()

    async def _sweep(self, live: set[str]) -> int:
        done = 0
        for folder in orphans(self.root, live, self.spec.stale_after):
            failed = False
            for local, path in saved(folder):
                fid = self.know.fleet_id(folder.name, local)
                there = self.know.holder(fid, self.know.live())
                if there is not None and there[0] != folder.name:
                    # Restored by an earlier sweep that stopped before removing the file.
                    path.unlink(missing_ok=True)
                    self._pending.discard(fid)
                    continue
                try:
                    data = await asyncio.to_thread(path.read_bytes)
                    uid, new = await self.replicas.import_context.remote(RouteHint(), data, fid)
                except Exception:
                    log.exception("restoring a checkpointed context failed", extra={"context": fid})
                    failed = True
                    continue
                self.know.learn(fid, uid, new)
                self._pending.discard(fid)
                path.unlink(missing_ok=True)
                done += 1
            if not failed:
                shutil.rmtree(folder, ignore_errors=True)
                # The dead replica's home held the same contexts (and its lock): nothing
                # there is used again, and a fleet restarted many times would pile them up.
                shutil.rmtree(self.homes / folder.name, ignore_errors=True)
            log.info("restored a dead replica's contexts", extra={"replica": folder.name, "contexts": done})
        if done:
            self.restored += done
            self.save_aliases()
        return done

"""Server-held contexts: named token prefixes whose KV lives in a pinned pool entry, or in
a spill file on disk when it is not resident.

A fork is a record pointing at the same holder (one more pin), not a KV copy: forking a
4,000-token context a thousand ways costs a thousand small records. Engine-thread only.

A context's KV is a prefix-cache entry of the context's namespace (its creator's, or
SHARED for one an admin shared). The store's folder has one owner process at a time
(kv/storelock.py); the index is replaced atomically, and nothing is deleted at start: a
spill file the index does not name (written after the last index by a process that then
died) becomes a context again.
"""

from __future__ import annotations

import json
import logging
import math
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from ..errors import Conflict, InvalidRequest, LlamayError, NotFound, Overloaded
from .pool import SHARED, SeqPool
from .seqstate import SPOOL_PREFIX, StateFile
from .snapshot import SnapshotHeader, read_snapshot, write_snapshot
from .storelock import StoreLock, write_atomic

__all__ = ["ContextRecord", "Contexts", "StateOps"]

log = logging.getLogger("llamay.contexts")


class StateOps(Protocol):
    def seq_state(self, seq: int) -> bytes: ...
    def set_seq_state(self, seq: int, data: bytes) -> bool: ...
    def load_seq_state_file(self, seq: int, path: str) -> bool: ...
    def seq_pos_max(self, seq: int) -> int: ...


@dataclass
class ContextRecord:
    """`tokens` is what the context holds; the first `n_kv` of them have KV (the last
    sampled token of a reply is computed by the next request)."""

    id: str
    tokens: list[int]
    n_kv: int
    owner: str | None
    marking: str | None
    created: float
    holder: int | None = None  # pool entry seq id while resident
    spill: str | None = None  # snapshot file while not resident
    busy: bool = False
    namespace: str = ""  # the prefix-cache namespace its KV belongs to

    def public(self, model: str) -> dict[str, object]:
        # A record read from an older index may hold any float: never fail a listing on it.
        created = int(self.created) if math.isfinite(self.created) else 0
        return {
            "id": self.id,
            "object": "context",
            "model": model,
            "tokens": len(self.tokens),
            "owner": self.owner,
            "marking": self.marking,
            "created": created,
            "resident": self.holder is not None,
            "shared": self.namespace == SHARED,
        }


class Contexts:
    def __init__(self, pool: SeqPool, state: StateOps, folder: Path, model_name: str, model_sha: str) -> None:
        self.pool = pool
        self.state = state
        self.folder = folder
        self.model_name = model_name
        self.model_sha = model_sha
        self.records: dict[str, ContextRecord] = {}
        self.lock = StoreLock(folder)  # StoreBusy when another process owns the folder

    # -- records -----------------------------------------------------------------------
    def get(self, cid: str) -> ContextRecord:
        rec = self.records.get(cid)
        if rec is None:
            raise NotFound(f"context '{cid}' not found", param="context")
        return rec

    def begin(self, cid: str, check: Callable[[ContextRecord], None]) -> list[int]:
        """Reserve a context for one request (Conflict if one already runs on it); `check`
        may refuse (e.g. the caller does not own it). Returns what the context holds."""
        rec = self.get(cid)
        check(rec)
        if rec.busy:
            raise Conflict(f"context '{cid}' is in use by another request; retry when it finishes")
        rec.busy = True
        return list(rec.tokens)

    def cancel(self, cid: str) -> None:
        """Undo `begin` for a request that never reached the engine."""
        rec = self.records.get(cid)
        if rec is not None:
            rec.busy = False

    def adopt(
        self,
        seq: int,
        tokens: list[int],
        n_kv: int,
        owner: str | None,
        marking: str | None,
        namespace: str = "",
        *,
        cid: str | None = None,
    ) -> ContextRecord:
        """A finished sequence becomes a new context's pinned holder, in `namespace`, under
        id `cid` (by default a new one)."""
        self.pool.keep(seq, tokens[:n_kv], pins=1, namespace=namespace)
        rec = ContextRecord(
            cid or _new_id(), list(tokens), n_kv, owner, marking, time.time(), holder=seq, namespace=namespace
        )
        self.records[rec.id] = rec
        return rec

    def update(self, rec: ContextRecord, seq: int, tokens: list[int], n_kv: int) -> None:
        """A request on `rec` finished in `seq`: the context now holds its prompt + reply."""
        self._unpin(rec)
        self.pool.keep(seq, tokens[:n_kv], pins=1, namespace=rec.namespace)
        rec.tokens, rec.n_kv, rec.holder, rec.spill = list(tokens), n_kv, seq, None

    def fork(self, cid: str, n: int) -> list[ContextRecord]:
        src = self.get(cid)
        out = []
        for _ in range(n):
            rec = ContextRecord(_new_id(), src.tokens, src.n_kv, src.owner, src.marking, time.time(),
                                holder=src.holder, spill=src.spill, namespace=src.namespace)  # fmt: skip
            if rec.holder is not None:
                self.pool.entries[rec.holder].pins += 1
            self.records[rec.id] = rec
            out.append(rec)
        return out

    def delete(self, cid: str) -> None:
        rec = self.get(cid)
        if rec.busy:
            raise Conflict(f"context '{cid}' is in use by a running request")
        self._unpin(rec)
        del self.records[cid]

    # -- residency ---------------------------------------------------------------------
    def resident(self, rec: ContextRecord, acquire: Callable[[], int | None]) -> int:
        """The holder seq of `rec`, restoring it from its spill file first if needed."""
        if rec.holder is not None:
            self.pool.touch(rec.holder)
            return rec.holder
        path = rec.spill
        assert path is not None
        header, state = read_snapshot(Path(path).read_bytes())
        seq = acquire()
        if seq is None:
            raise Overloaded("no sequence is free to restore the context into; retry shortly")
        if not self._load_state(seq, state):
            self.pool.release(seq)
            raise Overloaded(
                f"the KV cache has no room to bring context '{rec.id}' back right now; retry shortly"
            )
        n_kv = self.state.seq_pos_max(seq) + 1
        self.pool.keep(seq, header.tokens[:n_kv], pins=0, namespace=rec.namespace)
        for other in self.records.values():  # every record sharing that file comes back together
            if other.spill == path:
                other.holder, other.spill = seq, None
                self.pool.entries[seq].pins += 1
        return seq

    def check(self) -> None:
        """Assert the bookkeeping invariant: an entry's pins = the records it holds."""
        for seq, entry in self.pool.entries.items():
            held = sum(1 for r in self.records.values() if r.holder == seq)
            assert entry.pins == held, f"entry {seq}: {entry.pins} pins, {held} records"

    def spill_lru(self) -> bool:
        """Write the least recently used idle pinned holder to disk and free its sequence."""
        busy = {r.holder for r in self.records.values() if r.busy}
        pinned = [e for e in self.pool.entries.values() if e.pins > 0 and e.seq not in busy]
        if not pinned:
            return False
        self.spill_entry(min(pinned, key=lambda e: e.last_used).seq)
        return True

    def spill_entry(self, seq: int, *, durable: bool = False) -> Path:
        sharers = [r for r in self.records.values() if r.holder == seq]
        path = self.folder / f"{sharers[0].id}.llamayctx"
        self._write(path, sharers[0], self.state.seq_state(seq), durable=durable)
        for r in sharers:
            r.holder, r.spill = None, str(path)
        self.pool.drop(seq)
        return path

    # -- snapshots ---------------------------------------------------------------------
    def snapshot(self, rec: ContextRecord, key: bytes | None = None) -> bytes:
        if rec.holder is not None:
            state = self.state.seq_state(rec.holder)
        else:
            assert rec.spill is not None
            _, state = read_snapshot(Path(rec.spill).read_bytes())
        return write_snapshot(self._header(rec), state, key)

    def _load_state(self, seq: int, state: bytes | StateFile) -> bool:
        """Load state into `seq`, making room first if needed: llama.cpp wants one free run
        of cells as long as the state, so cached prefixes, then idle contexts, give way. A
        StateFile is read by llama.cpp from disk, a layer's rows at a time."""
        while not self._set(seq, state):
            if not (self.pool.evict_one() or self.spill_lru()):
                return False
        return True

    def _set(self, seq: int, state: bytes | StateFile) -> bool:
        if isinstance(state, StateFile):
            return self.state.load_seq_state_file(seq, state.path)
        return self.state.set_seq_state(seq, state)

    def restore(
        self,
        header: SnapshotHeader,
        state: bytes | StateFile,
        acquire: Callable[[], int | None],
        *,
        owner: str | None,
        namespace: str,
        check_state: Callable[[bytes | StateFile], int] | None = None,
        cid: str | None = None,
    ) -> ContextRecord:
        """A new context from a snapshot, owned by `owner` in `namespace` (the caller
        decides what a snapshot is trusted with), under a new id or, given one, `cid` (a
        fleet moving a context keeps its id; Conflict if this cache already has it). `check_state` (the state's cell count, or
        InvalidRequest) runs first, so a state llama.cpp would reject never makes cached
        prefixes or idle contexts give way: only a well-formed one that finds no free run of
        cells does, and if it still finds none, that is Overloaded (503). A StateFile is
        held open from the check to the load."""
        if isinstance(state, StateFile):
            if check_state is None:
                raise ValueError("a StateFile is loaded only after check_state (see seqstate.StateFile)")
            with state.held() as held:
                return self._restore(header, held, acquire, owner, namespace, check_state, cid)
        return self._restore(header, state, acquire, owner, namespace, check_state, cid)

    def _restore(
        self,
        header: SnapshotHeader,
        state: bytes | StateFile,
        acquire: Callable[[], int | None],
        owner: str | None,
        namespace: str,
        check_state: Callable[[bytes | StateFile], int] | None,
        cid: str | None = None,
    ) -> ContextRecord:
        if cid is not None and (cid in self.records or not _ID.fullmatch(cid)):
            raise Conflict(f"context '{cid}' exists here already or is not a context id")
        if check_state is not None:
            n_cells = check_state(state)
            if n_cells > len(header.tokens):
                raise InvalidRequest("the snapshot's KV state holds more positions than its tokens")
        seq = acquire()
        if seq is None:
            raise Overloaded("no sequence is free to restore into; retry shortly")
        if not self._load_state(seq, state):
            self.pool.release(seq)
            raise Overloaded("the KV cache has no room for this context right now (running requests hold it)")
        n_kv = self.state.seq_pos_max(seq) + 1
        if n_kv > len(header.tokens):
            self.pool.release(seq)
            raise InvalidRequest("the snapshot's KV state holds more positions than its tokens")
        return self.adopt(seq, header.tokens, n_kv, owner, header.marking, namespace, cid=cid)

    # -- persistence -------------------------------------------------------------------
    def save_all(self) -> None:
        """Write every resident context to disk and an index of all of them (atomically:
        a kill mid-write leaves the previous index), then give the store up."""
        if not self.lock.held:
            return
        try:
            for seq in {r.holder for r in self.records.values() if r.holder is not None}:
                self.spill_entry(seq, durable=True)  # type: ignore[arg-type]
            index = [asdict(r) | {"holder": None, "busy": False} for r in self.records.values()]
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            body = json.dumps({"model_sha256": self.model_sha, "contexts": index}).encode()
            write_atomic(self.folder / "index.json", body)
        finally:
            self.lock.release()  # even if a write failed: the process is leaving

    def load_all(self) -> int:
        """Read the index (records whose file is gone or unreadable are skipped, with a
        log line), then recover spill files it does not name. Deletes nothing but the
        half-received uploads of a process that was killed (this one owns the folder now)."""
        for upload in self.folder.glob(f"{SPOOL_PREFIX}*"):
            upload.unlink(missing_ok=True)
        path = self.folder / "index.json"
        items: list[object] = []
        if path.is_file():
            try:
                items = list(json.loads(path.read_text()).get("contexts", []))
            except (OSError, ValueError, AttributeError, TypeError) as exc:
                log.warning(
                    "context index unreadable; recovering from its files",
                    extra={"fields": {"error": str(exc)}},
                )
        for item in items:
            try:
                rec = ContextRecord(**item)  # type: ignore[arg-type]
                float(rec.created)
            except (TypeError, ValueError):
                log.warning("skipping a malformed context record", extra={"fields": {"path": str(path)}})
                continue
            if rec.spill and Path(rec.spill).is_file():
                self.records[rec.id] = rec
        used = {r.spill for r in self.records.values()}
        for f in sorted(self.folder.glob("ctx_*.llamayctx")):
            if str(f) not in used and f.stem not in self.records:
                self._recover(f)
        return len(self.records)

    def _recover(self, path: Path) -> None:
        try:
            header, _ = read_snapshot(path.read_bytes())
        except (OSError, LlamayError) as exc:
            log.warning(
                "unreadable spill file left as is", extra={"fields": {"path": str(path), "error": str(exc)}}
            )
            return
        created = header.created if math.isfinite(header.created) else time.time()
        self.records[path.stem] = ContextRecord(
            path.stem, header.tokens, header.n_kv or len(header.tokens), header.owner, header.marking, created,
            spill=str(path), namespace=header.namespace or "",
        )  # fmt: skip

    # -- helpers -----------------------------------------------------------------------
    def _unpin(self, rec: ContextRecord) -> None:
        if rec.holder is not None and rec.holder in self.pool.entries:
            self.pool.entries[rec.holder].pins -= 1
        old = rec.spill
        rec.holder = rec.spill = None
        if old and not any(r.spill == old for r in self.records.values() if r is not rec):
            Path(old).unlink(missing_ok=True)

    def _header(self, rec: ContextRecord) -> SnapshotHeader:
        return SnapshotHeader(
            self.model_name,
            self.model_sha,
            rec.tokens,
            rec.owner,
            rec.marking,
            rec.created,
            rec.namespace,
            rec.n_kv,
        )

    def _write(self, path: Path, rec: ContextRecord, state: bytes, *, durable: bool) -> None:
        """A spill file, replaced atomically; `durable` also waits for the disk (at
        shutdown; a spill under KV pressure only needs to survive the process)."""
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomic(path, write_snapshot(self._header(rec), state), durable=durable)  # mode 0600


_ID = re.compile(r"ctx_[0-9a-f]{24}")


def _new_id() -> str:
    return "ctx_" + secrets.token_hex(12)

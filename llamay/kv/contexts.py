"""Server-held contexts: named token prefixes whose KV lives in a pinned pool entry, or in
a spill file on disk when it is not resident.

A fork is a record pointing at the same holder (one more pin), not a KV copy: forking a
4,000-token context a thousand ways costs a thousand small records. Engine-thread only.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from ..errors import Conflict, InvalidRequest, NotFound, Overloaded
from .pool import SeqPool
from .snapshot import SnapshotHeader, read_snapshot, write_snapshot

__all__ = ["ContextRecord", "Contexts", "StateOps"]

log = logging.getLogger("llamay.contexts")


class StateOps(Protocol):
    def seq_state(self, seq: int) -> bytes: ...
    def set_seq_state(self, seq: int, data: bytes) -> bool: ...
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

    def public(self, model: str) -> dict[str, object]:
        return {
            "id": self.id,
            "object": "context",
            "model": model,
            "tokens": len(self.tokens),
            "owner": self.owner,
            "marking": self.marking,
            "created": int(self.created),
            "resident": self.holder is not None,
        }


class Contexts:
    def __init__(self, pool: SeqPool, state: StateOps, folder: Path, model_name: str, model_sha: str) -> None:
        self.pool = pool
        self.state = state
        self.folder = folder
        self.model_name = model_name
        self.model_sha = model_sha
        self.records: dict[str, ContextRecord] = {}

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
        self, seq: int, tokens: list[int], n_kv: int, owner: str | None, marking: str | None
    ) -> ContextRecord:
        """A finished sequence becomes a new context's pinned holder."""
        self.pool.keep(seq, tokens[:n_kv], pins=1)
        rec = ContextRecord(_new_id(), list(tokens), n_kv, owner, marking, time.time(), holder=seq)
        self.records[rec.id] = rec
        return rec

    def update(self, rec: ContextRecord, seq: int, tokens: list[int], n_kv: int) -> None:
        """A request on `rec` finished in `seq`: the context now holds its prompt + reply."""
        self._unpin(rec)
        self.pool.keep(seq, tokens[:n_kv], pins=1)
        rec.tokens, rec.n_kv, rec.holder, rec.spill = list(tokens), n_kv, seq, None

    def fork(self, cid: str, n: int) -> list[ContextRecord]:
        src = self.get(cid)
        out = []
        for _ in range(n):
            rec = ContextRecord(_new_id(), src.tokens, src.n_kv, src.owner, src.marking, time.time(),
                                holder=src.holder, spill=src.spill)  # fmt: skip
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
        self.pool.keep(seq, header.tokens[:n_kv], pins=0)
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

    def spill_entry(self, seq: int) -> Path:
        sharers = [r for r in self.records.values() if r.holder == seq]
        path = self.folder / f"{sharers[0].id}.llamayctx"
        self._write(path, sharers[0], self.state.seq_state(seq))
        for r in sharers:
            r.holder, r.spill = None, str(path)
        self.pool.drop(seq)
        return path

    # -- snapshots ---------------------------------------------------------------------
    def snapshot(self, rec: ContextRecord) -> bytes:
        if rec.holder is not None:
            state = self.state.seq_state(rec.holder)
        else:
            assert rec.spill is not None
            _, state = read_snapshot(Path(rec.spill).read_bytes())
        return write_snapshot(self._header(rec), state)

    def _load_state(self, seq: int, state: bytes) -> bool:
        """Load state into `seq`, making room first if needed: llama.cpp wants one free run
        of cells as long as the state, so cached prefixes, then idle contexts, give way."""
        while not self.state.set_seq_state(seq, state):
            if not (self.pool.evict_one() or self.spill_lru()):
                return False
        return True

    def restore(
        self, header: SnapshotHeader, state: bytes, acquire: Callable[[], int | None]
    ) -> ContextRecord:
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
        return self.adopt(seq, header.tokens, n_kv, header.owner, header.marking)

    # -- persistence -------------------------------------------------------------------
    def save_all(self) -> None:
        """Write every resident context to disk and an index of all of them."""
        for seq in {r.holder for r in self.records.values() if r.holder is not None}:
            self.spill_entry(seq)  # type: ignore[arg-type]
        index = [asdict(r) | {"holder": None, "busy": False} for r in self.records.values()]
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / "index.json.tmp"
        tmp.write_text(json.dumps({"model_sha256": self.model_sha, "contexts": index}))
        os.replace(tmp, self.folder / "index.json")

    def load_all(self) -> int:
        path = self.folder / "index.json"
        if not path.is_file():
            return 0
        data = json.loads(path.read_text())
        for item in data.get("contexts", []):
            rec = ContextRecord(**item)
            if rec.spill and Path(rec.spill).is_file():
                self.records[rec.id] = rec
        used = {r.spill for r in self.records.values()}
        for f in self.folder.glob("*.llamayctx"):  # files no saved context points at
            if str(f) not in used:
                f.unlink(missing_ok=True)
        return len(self.records)

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
            self.model_name, self.model_sha, rec.tokens, rec.owner, rec.marking, rec.created
        )

    def _write(self, path: Path, rec: ContextRecord, state: bytes) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(write_snapshot(self._header(rec), state))
        os.replace(tmp, path)


def _new_id() -> str:
    return "ctx_" + secrets.token_hex(12)

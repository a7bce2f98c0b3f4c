"""One owner for a model's KV: the sequence pool (with its prefix cache and RAM stash),
the server-held contexts, and what happens to a sequence when its request ends.

The engine is given a `KvManager` and asks it for sequence ids, for the cached or
context-held prefix a new request starts from, to settle a finished sequence, and to
free idle KV under pressure. The contexts API goes through the same object (find, begin,
fork, snapshot, ...). Engine-thread only: other threads reach it through `Engine.call`.

KV operations go through `KvBackend`, so the whole policy is tested without weights.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..errors import InvalidRequest
from .contexts import ContextRecord, Contexts
from .pool import SeqPool
from .seqstate import Layout, StateFile, parse_state
from .snapshot import SnapshotHeader

__all__ = ["KvBackend", "KvManager", "KvUsage", "SessionLike", "Settled"]

log = logging.getLogger("llamay.kv")


class KvBackend(Protocol):
    """The llama context's KV operations (backend.context.Context is one)."""

    @property
    def n_ctx(self) -> int: ...

    @property
    def n_seq_max(self) -> int: ...

    @property
    def flash_attn(self) -> bool: ...  # attention skips other sequences' cells

    def seq_rm(self, seq: int, p0: int = -1, p1: int = -1) -> bool: ...
    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None: ...
    def seq_pos_max(self, seq: int) -> int: ...
    def seq_state(self, seq: int) -> bytes: ...
    def set_seq_state(self, seq: int, data: bytes) -> bool: ...
    def load_seq_state_file(self, seq: int, path: str) -> bool: ...


class SessionLike(Protocol):
    """A request's server-held context (engine.request.SessionSpec is one)."""

    @property
    def context_id(self) -> str | None: ...

    @property
    def create(self) -> bool: ...

    @property
    def owner(self) -> str | None: ...

    @property
    def marking(self) -> str | None: ...


class Settled(Protocol):
    """A sequence whose request ended (engine.sequence.Sequence is one): `tokens` are its
    prompt + sampled tokens, the first `n_past` of them in the KV cache."""

    @property
    def seq_id(self) -> int: ...

    @property
    def tokens(self) -> list[int]: ...

    @property
    def n_past(self) -> int: ...

    @property
    def n_prompt(self) -> int: ...


@dataclass(frozen=True)
class KvUsage:
    """KV positions held for running requests (and sequences being set up), and by
    the prefix cache and contexts (shared cells counted once per holder)."""

    running: int
    cached: int


class KvManager:
    """The pool, the contexts and session settlement behind one engine-thread object."""

    def __init__(self, ops: KvBackend, pool: SeqPool, contexts: Contexts) -> None:
        self.ops = ops
        self.pool = pool
        self.contexts = contexts
        self._layout: Layout | None = None

    @classmethod
    def create(
        cls,
        ops: KvBackend,
        *,
        folder: Path | None = None,
        model_name: str = "model",
        model_sha256: str = "",
        cache_ram: int = 512 * 1024 * 1024,
    ) -> KvManager:
        """The manager for one llama context: ids beyond the running cap hold finished
        sequences as a prefix cache (at most a quarter of the context while unpinned),
        `cache_ram` bytes hold prefixes moved out of the KV cache, and contexts spill to and
        are saved in `folder` (None: a new temporary folder). Contexts saved there before
        are loaded back."""
        # Without flash attention every step reads every cell in use, so idle prefixes leave
        # the KV cache early; with it they cost other work next to nothing and stay.
        idle_after = None if ops.flash_attn else 64
        pool = SeqPool(
            ops.n_seq_max, ops, budget=ops.n_ctx // 4, stash_bytes=cache_ram, idle_after=idle_after
        )
        if folder is None:
            folder = Path(tempfile.mkdtemp(prefix="llamay-contexts-"))
        contexts = Contexts(pool, ops, folder, model_name, model_sha256)
        if contexts.load_all():
            log.info("contexts restored from disk", extra={"fields": {"count": len(contexts.records)}})
        return cls(ops, pool, contexts)

    # -- sequences of running requests -----------------------------------------------------
    def acquire(self) -> int | None:
        """A free sequence id: evicting cached prefixes, then spilling idle contexts; None
        when every id is running."""
        seq = self.pool.acquire()
        if seq is None and self.contexts.spill_lru():
            seq = self.pool.acquire()
        return seq

    def release(self, seq: int) -> None:
        """Drop the KV of a sequence nobody keeps and free its id."""
        self.pool.release(seq)

    def attach(
        self,
        seq: int,
        tokens: list[int],
        limit: int,
        *,
        context_id: str | None,
        share: bool,
        namespace: str = "",
    ) -> int:
        """Give a new sequence the KV it can start from, at most `limit` positions: what
        context `context_id` holds (brought back from disk if spilled), else with `share`
        the longest cached prefix of `tokens` that `namespace` may use (its own or SHARED).
        Returns the positions `seq` now holds. Raises NotFound / Overloaded when the
        context is gone or cannot be brought back."""
        if context_id is None:
            return self.pool.attach(seq, tokens, limit, namespace) if share else 0
        rec = self.contexts.get(context_id)
        holder = self.contexts.resident(rec, self.acquire)
        n = min(rec.n_kv, limit)
        self.ops.seq_cp(holder, seq, 0, n)
        return n

    def share_running(self, src: int, dst: int, n: int) -> None:
        """Make `dst` hold exactly positions [0, n) of running sequence `src`, which computed
        them as prompt (what `dst` held, a shorter cached prefix, is dropped first)."""
        self.ops.seq_rm(dst)
        self.ops.seq_cp(src, dst, 0, n)

    def reattach(self, seq: int, tokens: list[int], limit: int, namespace: str) -> int:
        """Start `seq` over from the longest cached prefix of `tokens` (as `attach` with
        `share`), dropping what it held; the positions it now holds."""
        self.ops.seq_rm(seq)
        return self.pool.attach(seq, tokens, limit, namespace)

    def trim(self, seq: int, n: int) -> None:
        """Keep positions [0, n) of running sequence `seq` (drafts it did not take go)."""
        self.ops.seq_rm(seq, n, -1)

    def expect(self, n_tokens: int) -> None:
        """`n_tokens` are about to be computed (see SeqPool.expect)."""
        self.pool.expect(n_tokens)

    def age(self, n_tokens: int) -> None:
        """`n_tokens` were just computed (see SeqPool.age)."""
        self.pool.age(n_tokens)

    def settle(
        self, s: Settled, session: SessionLike | None, *, completed: bool, cache: bool, namespace: str = ""
    ) -> str | None:
        """A request of `namespace` ended; its sequence's id is no longer the caller's.
        `completed`: it ended with stop or length. A completed session request's sequence
        becomes the context's holder (a new context, in `namespace`, with `session.create`);
        else, with `cache`, a completed request's sequence, or any request's outside a
        session (one its client left: what it computed is as good), becomes a prefix-cache
        entry of `namespace`; else it is freed. Returns the context id that took the
        sequence, if one did."""
        ok = completed and s.n_past > 0
        cid = self._settle_session(s, session, ok, namespace)
        if cid is None:
            if cache and s.n_past > 0 and (ok or session is None):
                self.pool.keep(s.seq_id, s.tokens[: self._shareable(s)], namespace=namespace)
            else:
                self.pool.release(s.seq_id)
        return cid

    def abandon(self, session: SessionLike | None) -> None:
        """A session request ended without a sequence worth keeping: its context (if it
        continued one) is free for the next request, unchanged."""
        if session is not None and not session.create and session.context_id is not None:
            self.contexts.cancel(session.context_id)

    def _settle_session(
        self, s: Settled, session: SessionLike | None, ok: bool, namespace: str
    ) -> str | None:
        if session is None:
            return None
        if session.create:
            if not ok:
                return None
            return self.contexts.adopt(
                s.seq_id, s.tokens, self._shareable(s), session.owner, session.marking, namespace
            ).id
        assert session.context_id is not None
        current = self.contexts.records.get(session.context_id)
        if current is None:
            return None
        current.busy = False
        if not ok:
            return None
        self.contexts.update(current, s.seq_id, s.tokens, self._shareable(s))
        return current.id

    def _shareable(self, s: Settled) -> int:
        """How many leading positions of a finished sequence may be shared with later
        requests: those computed as prompt (in chunks of two or more tokens). Positions
        computed one token per step while generating get slightly different KV values than
        the same tokens read as a prompt, and sharing them would make a cache hit change
        output; they are dropped here and recomputed by whoever needs them."""
        n = min(s.n_past, s.n_prompt)
        if n < s.n_past:
            self.ops.seq_rm(s.seq_id, n, -1)
        return n

    # -- pressure and accounting -------------------------------------------------------------
    def make_room(self) -> bool:
        """Free KV nobody is computing with: the least recently used cached prefix, else
        the least recently used idle context (spilled to disk). False if neither exists."""
        return self.pool.evict_one() or self.contexts.spill_lru()

    def usage(self, running: Collection[int]) -> KvUsage:
        """Measure what llama.cpp holds: `running` are the ids of running sequences."""
        held = {i: self.ops.seq_pos_max(i) + 1 for i in range(self.ops.n_seq_max)}
        entries = self.pool.entries
        busy = sum(n for i, n in held.items() if i in running or (i not in entries and n))
        return KvUsage(busy, sum(n for i, n in held.items() if i in entries))

    def ram_cache(self) -> dict[str, int]:
        """Cached prefixes moved out of the KV cache into RAM: entries and bytes."""
        stash = self.pool.stash
        return {"entries": len(stash), "bytes": stash.bytes, "capacity": stash.capacity}

    def save(self) -> None:
        """Write every context to disk and give the store up (at shutdown)."""
        self.contexts.save_all()

    # -- server-held contexts ----------------------------------------------------------------
    def find(self, cid: str) -> ContextRecord | None:
        return self.contexts.records.get(cid)

    def get(self, cid: str) -> ContextRecord:
        """The context `cid`; NotFound if there is none."""
        return self.contexts.get(cid)

    def records(self) -> list[ContextRecord]:
        """Every context of this model."""
        return list(self.contexts.records.values())

    def begin(self, cid: str, check: Callable[[ContextRecord], None]) -> list[int]:
        """Reserve context `cid` for one request and return the tokens it holds (see
        Contexts.begin); the engine releases it when the request ends."""
        return self.contexts.begin(cid, check)

    def cancel(self, cid: str) -> None:
        """Undo `begin` for a request that never reached the engine."""
        self.contexts.cancel(cid)

    def fork(self, cid: str, n: int) -> list[ContextRecord]:
        """`n` new contexts holding what `cid` holds (sharing its KV, no copy)."""
        return self.contexts.fork(cid, n)

    def delete(self, cid: str) -> None:
        """Forget context `cid`; Conflict while a request runs on it."""
        self.contexts.delete(cid)

    def snapshot(self, cid: str, key: bytes | None = None) -> bytes:
        """Context `cid` in the snapshot file format (signed with `key`, if given)."""
        return self.contexts.snapshot(self.contexts.get(cid), key)

    def restore(
        self,
        header: SnapshotHeader,
        state: bytes | StateFile,
        *,
        owner: str | None = None,
        namespace: str = "",
        check_state: Callable[[bytes | StateFile], int] | None = None,
        cid: str | None = None,
    ) -> ContextRecord:
        """A new context (under a new id, or `cid`: see `Contexts.restore`) from a snapshot's header and state (its bytes, or a StateFile that
        llama.cpp reads from disk; the caller checked the model and decided its owner and
        namespace): InvalidRequest when `check_state` refuses the state, Overloaded when no
        id or KV room can be made for it.

        llama.cpp reads a state file trusting its structure, and aborts the process when the
        file ends before it: so a file goes to it only once this cache's own states are known
        to parse as `parse_state` reads them (their layout learned). Before that (a cache that
        holds no KV at all) the state is read into memory and handed over as bytes, which
        llama.cpp reads with bounds checks."""
        if isinstance(state, StateFile) and self._own_layout() is None:
            state = state.read()
        return self.contexts.restore(
            header, state, self.acquire, owner=owner, namespace=namespace, check_state=check_state, cid=cid
        )

    def check_state(self, state: bytes | StateFile) -> int:
        """The cells a state to be restored holds; InvalidRequest unless it is well formed
        and laid out like this cache's own states. The layout is learned from a state the
        cache holds; while it holds none there is nothing a bad state could push out, and
        llama.cpp's own checks decide."""
        cells, layout = parse_state(state, self.ops.n_ctx)
        known = self._own_layout()
        if known is not None and layout != known:
            raise InvalidRequest("the snapshot's KV state does not match this model's KV layout (damaged?)")
        return cells

    def held_by(self, owner: str) -> tuple[int, int]:
        """How many contexts `owner` has and the bytes of KV they keep (a fork shares its
        parent's KV and adds none; a spilled context counts its file)."""
        mine = [r for r in self.contexts.records.values() if r.owner == owner]
        layout = self._own_layout()
        per_cell = layout.bytes_per_cell() if layout is not None else 0
        seen: dict[object, int] = {}
        for r in mine:
            if r.holder is not None:
                seen[("kv", r.holder)] = r.n_kv * per_cell
            elif r.spill is not None:
                seen[r.spill] = _size(r.spill)
        return len(mine), sum(seen.values())

    def bytes_per_cell(self) -> int:
        """State bytes per cached position (0 until the cache holds any KV)."""
        layout = self._own_layout()
        return layout.bytes_per_cell() if layout is not None else 0

    def _own_layout(self) -> Layout | None:
        """The layout of this cache's states, learned once from one position of its
        smallest entry (shared into a free id for a moment: no copy of a long state), else
        from a stashed state; None while the cache holds neither."""
        if self._layout is None:
            src = min(
                (e for e in self.pool.entries.values() if e.tokens), key=lambda e: len(e.tokens), default=None
            )
            sample = None
            if src is not None and self.pool.free:
                tmp = self.pool.free[-1]  # borrowed, not taken: engine-thread only
                self.ops.seq_cp(src.seq, tmp, 0, 1)
                try:
                    sample = self.ops.seq_state(tmp)
                finally:
                    self.ops.seq_rm(tmp)
            elif src is not None:
                sample = self.ops.seq_state(src.seq)
            elif self.pool.stash.items:
                sample = min(self.pool.stash.items.values(), key=lambda i: len(i.state)).state
            if sample is not None:
                self._layout = parse_state(sample, self.ops.n_ctx)[1]
        return self._layout

    def check(self) -> None:
        """Assert the bookkeeping invariants (see Contexts.check)."""
        self.contexts.check()


def _size(path: str) -> int:
    try:
        return Path(path).stat().st_size
    except OSError:
        return 0

"""The fleet's routing knowledge and policy, free of Ray so it is tested on its own.

`FleetKnowledge` is what the ingress process knows: which replica holds each context (learned
from responses and from the replicas' own context lists), which prompt prefixes it has sent to
each replica (a bounded index of block hashes), and which replicas are gone. `rank` turns a
request's hint and the replicas' loads into an ordered preference."""

from __future__ import annotations

import random
import threading
from collections import OrderedDict
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass, field

from .hints import RouteHint

__all__ = ["FleetKnowledge", "ReplicaView", "knowledge", "rank", "LOAD_BOUND", "PREFIX_CAP"]

LOAD_BOUND = 4  # requests a prefix-affine replica may run ahead of the least loaded one
PREFIX_CAP = 200_000  # block hashes remembered per replica (~16 MB of prompts at 128 B a block)


@dataclass
class ReplicaView:
    """One live replica as the router sees it now. `load`: requests running or queued there
    (None: unknown); `models`: models it has loaded; `contexts`: ids it reported holding;
    `prefixes`: prompt block hashes it reported being sent lately (by any ingress)."""

    uid: str
    load: int | None = None
    models: frozenset[str] = frozenset()
    contexts: frozenset[str] = frozenset()
    prefixes: frozenset[int] = frozenset()

    def reported_match(self, prefix: Sequence[int]) -> int:
        """Leading blocks of `prefix` among the hashes this replica reported."""
        return _leading(prefix, self.prefixes)


def _leading(prefix: Sequence[int], known: Container[int]) -> int:
    """How many of `prefix`'s first blocks are all in `known`."""
    n = 0
    for h in prefix:
        if h not in known:
            break
        n += 1
    return n


@dataclass
class _PrefixIndex:
    hashes: OrderedDict[int, None] = field(default_factory=OrderedDict)

    def add(self, prefix: Sequence[int], cap: int) -> list[int]:
        """Index `prefix` (most recent last); returns the hashes that were not indexed yet."""
        new = []
        for h in prefix:
            if h not in self.hashes:
                new.append(h)
            self.hashes[h] = None
            self.hashes.move_to_end(h)
        while len(self.hashes) > cap:
            self.hashes.popitem(last=False)
        return new

    def match(self, prefix: Sequence[int]) -> int:
        return _leading(prefix, self.hashes)


class FleetKnowledge:
    """Thread-safe: the ingress's event loop and Ray's router loop both use it.

    Context ids are fleet-wide: `holder(fid)` gives (replica, local id), where the local id
    differs from `fid` only after the context moved (drain, recovery), since a restore gets a
    new id on its new replica."""

    def __init__(self, prefix_cap: int = PREFIX_CAP) -> None:
        self._lock = threading.Lock()
        self._holders: dict[str, tuple[str, str]] = {}
        self._prefixes: dict[str, _PrefixIndex] = {}
        self._dead: set[str] = set()
        self._live: dict[str, ReplicaView] = {}
        self.prefix_cap = prefix_cap
        self.sent = 0
        self.prefix_hits = 0

    # -- contexts ------------------------------------------------------------------------
    def learn(self, fid: str, replica: str, local: str | None = None) -> None:
        with self._lock:
            self._holders[fid] = (replica, local or fid)

    def forget(self, fid: str) -> None:
        with self._lock:
            self._holders.pop(fid, None)

    def holder(self, fid: str, views: Iterable[ReplicaView] = ()) -> tuple[str, str] | None:
        """Who holds `fid` (learned, else from a replica's reported list), or None."""
        with self._lock:
            found = self._holders.get(fid)
            if found and found[0] not in self._dead and (not self._live or found[0] in self._live):
                return found
        for v in views:
            if fid in v.contexts:
                return v.uid, fid
        return None

    def learned(self, fid: str) -> tuple[str, str] | None:
        """(replica, local id) `fid` was learned on, live or not."""
        with self._lock:
            return self._holders.get(fid)

    def held_by(self, replica: str) -> dict[str, str]:
        """fleet id -> local id of every context learned to be on `replica`."""
        with self._lock:
            return {f: loc for f, (r, loc) in self._holders.items() if r == replica}

    def aliases(self) -> dict[str, tuple[str, str]]:
        """Contexts known under another id on their replica (moved ones)."""
        with self._lock:
            return {f: (r, loc) for f, (r, loc) in self._holders.items() if loc != f}

    def fleet_id(self, replica: str, local: str) -> str:
        with self._lock:
            for f, (r, loc) in self._holders.items():
                if r == replica and loc == local:
                    return f
        return local

    # -- replicas ------------------------------------------------------------------------
    def mark_dead(self, replica: str) -> None:
        with self._lock:
            self._dead.add(replica)
            self._prefixes.pop(replica, None)

    def set_live(self, uids: set[str], views: list[ReplicaView]) -> None:
        """The replicas Ray routes to now; the prefix index of one that left is dropped."""
        with self._lock:
            for gone in set(self._live) - uids:
                self._prefixes.pop(gone, None)
            self._live = {v.uid: v for v in views if v.uid in uids}

    def live(self) -> list[ReplicaView]:
        with self._lock:
            return [v for u, v in self._live.items() if u not in self._dead]

    def holder_lost(self, fid: str) -> bool:
        """Whether `fid` was learned on a replica that is gone (dead or left)."""
        with self._lock:
            found = self._holders.get(fid)
            return found is not None and (found[0] in self._dead or found[0] not in self._live)

    def is_dead(self, replica: str) -> bool:
        with self._lock:
            return replica in self._dead

    # -- prefixes ------------------------------------------------------------------------
    def record_sent(self, replica: str, hint: RouteHint) -> None:
        """Count a request Ray sent to `replica` and index its prefix there."""
        with self._lock:
            self.sent += 1
        self.claim(replica, hint)

    def claim(self, replica: str, hint: RouteHint) -> list[int]:
        """Index the prompt prefix of `hint` under `replica` (where it is about to go), so the
        next request of a burst already sees where this prefix went. Returns the hashes this
        added, for `unclaim` should the request go elsewhere."""
        if not hint.prefix:
            return []
        with self._lock:
            return self._prefixes.setdefault(replica, _PrefixIndex()).add(hint.prefix, self.prefix_cap)

    def unclaim(self, replica: str, hashes: Iterable[int]) -> None:
        """Take back what a `claim` on `replica` added: its request went to another replica,
        and an index that names a replica which never read the prefix sends its next
        requests to a cold cache."""
        with self._lock:
            index = self._prefixes.get(replica)
            if index is not None:
                for h in hashes:
                    index.hashes.pop(h, None)

    def blocks(self, replica: str) -> int:
        """Prompt blocks indexed under `replica`: how much prompt this router placed there."""
        with self._lock:
            index = self._prefixes.get(replica)
            return len(index.hashes) if index else 0

    def match(self, replica: str, prefix: Sequence[int]) -> int:
        with self._lock:
            index = self._prefixes.get(replica)
            return index.match(prefix) if index else 0


def _load(v: ReplicaView) -> int:
    return v.load if v.load is not None else 0


def rank(
    hint: RouteHint,
    views: Sequence[ReplicaView],
    know: FleetKnowledge,
    bound: int = LOAD_BOUND,
    rng: random.Random | None = None,
) -> list[list[str]]:
    """Replica ids in ranks, most preferred first (Ray probes each rank in turn and sends the
    request to a replica of the first rank that accepts it).

    1. A pinned request goes to its replica only. 2. A request on a context goes to the
    context's holder only (the KV is there; elsewhere it would be a 404). 3. Otherwise the
    candidates are the replicas with the request's model loaded (all, if none has it). Among
    them, the one whose sent prefixes match the prompt longest is first, unless its load
    exceeds the least loaded candidate's by more than `bound`: then power-of-two choices, so
    affinity never builds a hotspot. The two are ordered by load, then by the prompt blocks
    already placed on each: in a burst of new prefixes every load reads the same (Ray's
    queue lengths lag), and without the second key one replica took six tenants of eight,
    whose load then pushed requests off their cached prefixes. Each of the two is a rank of
    its own: within a rank Ray picks by its own queue lengths, which in a burst read the same,
    so a new prefix was claimed on one replica and computed on the other about half the
    time, and the tenant's next request followed the claim to a cold cache. Dead replicas
    never appear."""
    rng = rng or random.Random()
    live = [v for v in views if not know.is_dead(v.uid)]
    if not live:
        return []
    if hint.pin is not None:
        return [[v.uid for v in live if v.uid == hint.pin]]
    if hint.context is not None:
        found = know.holder(hint.context, live)
        if found is not None and any(v.uid == found[0] for v in live):
            return [[found[0]]]
    cands = [v for v in live if hint.model and hint.model in v.models] or live
    least = min(_load(v) for v in cands)
    if hint.prefix:
        # What this ingress sent, or what the replica reports any ingress sent it.
        matched = {v.uid: max(know.match(v.uid, hint.prefix), v.reported_match(hint.prefix)) for v in cands}
        scored = sorted(cands, key=lambda v: (-matched[v.uid], _load(v)))
        best = scored[0]
        if matched[best.uid] > 0 and _load(best) <= least + bound:
            return [[best.uid], [v.uid for v in sorted(scored[1:], key=_load)]]
    two = sorted(rng.sample(cands, min(2, len(cands))), key=lambda v: (_load(v), know.blocks(v.uid)))
    rest = [v.uid for v in sorted((v for v in cands if v not in two), key=_load)]
    return [[v.uid] for v in two] + ([rest] if rest else [])


_registry: dict[str, FleetKnowledge] = {}


def knowledge(name: str) -> FleetKnowledge:
    """The one `FleetKnowledge` of fleet `name` in this process (shared by the ingress and
    the router Ray builds beside it). dict.setdefault is atomic under the GIL."""
    found = _registry.get(name)
    return found if found is not None else _registry.setdefault(name, FleetKnowledge())

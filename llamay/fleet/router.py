"""Our Ray Serve request routers: `routing.rank` over the replicas Ray gives us, and, for
`-router ray`, Ray's own power-of-two choices with only our bookkeeping added.

Ray builds the router inside the process that holds the deployment handle (the ingress), so
the ingress and the router share one `FleetKnowledge` through `routing.knowledge(name)`. Ray
ships this class by value (cloudpickle), module globals included, so the registry lives in
`routing` and is reached through the module object, which pickles by reference."""

from __future__ import annotations

from typing import Any

from ray.serve._private.request_router.pow_2_router import PowerOfTwoChoicesRequestRouter
from ray.serve.request_router import (
    FIFOMixin,
    PendingRequest,
    ReplicaID,
    ReplicaResult,
    RequestRouter,
    RunningReplica,
)

# Only modules are imported by name: Ray ships this class by value, and a class or function
# imported from our modules would travel as a copy (isinstance against the copy fails).
from . import hints, routing

__all__ = ["LlamayRouter", "RayDefaultRouter", "hint_of"]

MAX_CLAIMS = 10_000  # claims awaiting Ray's routing; beyond it the oldest are forgotten (kept)


def hint_of(pending: PendingRequest | None) -> hints.RouteHint:
    if pending is not None and pending.args and isinstance(pending.args[0], hints.RouteHint):
        return pending.args[0]
    return hints.RouteHint()


class LlamayRouter(FIFOMixin, RequestRouter):
    """Context holder first, then the longest prefix this router sent (load-bounded), then
    power-of-two choices; model-aware (see `routing.rank`)."""

    def initialize_state(self, fleet: str = "llamay", bound: int = routing.LOAD_BOUND, **_: Any) -> None:
        self.know = routing.knowledge(fleet)
        self.bound = bound
        # request id -> (replica, hashes) its last ranking claimed, until Ray has routed it
        self.claims: dict[str, tuple[str, list[int]]] = {}
        # replica -> (the stats dict, its sets): built once per report, not per request
        self.reported: dict[str, tuple[object, frozenset[str], frozenset[str], frozenset[int]]] = {}

    def _view(self, r: RunningReplica) -> routing.ReplicaView:
        stats = r.routing_stats or {}
        load = self.replica_queue_len_cache.get(r.replica_id)
        if load is None and isinstance(stats.get("load"), int):
            load = stats["load"]
        uid = r.replica_id.unique_id
        seen = self.reported.get(uid)
        if seen is None or seen[0] is not stats:
            seen = (
                stats,
                frozenset(stats.get("models") or ()),
                frozenset(stats.get("contexts") or ()),
                frozenset(stats.get("prefixes") or ()),
            )
            self.reported[uid] = seen
        return routing.ReplicaView(uid=uid, load=load, models=seen[1], contexts=seen[2], prefixes=seen[3])

    def views(self) -> list[routing.ReplicaView]:
        """Every live replica as seen now (the ingress reads these for status and moves)."""
        return [self._view(r) for r in self.curr_replicas.values()]

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        if pending_request is not None:
            # Ray sleeps between rounds only when told to; without it, a round that finds no
            # replica (a pinned one that left, every one full) is retried at once, forever,
            # on the router's loop.
            pending_request.routing_context.should_backoff = True
        by_uid = {r.replica_id.unique_id: r for r in candidate_replicas}
        hint = hint_of(pending_request)
        key = pending_request.metadata.internal_request_id if pending_request is not None else None
        if key is not None and key in self.claims:  # an earlier round of this request
            self.know.unclaim(*self.claims.pop(key))
        ranks = routing.rank(hint, [self._view(r) for r in candidate_replicas], self.know, self.bound)
        if ranks and ranks[0] and hint.prefix:
            # Claimed now, not when Ray has routed it: the rest of a burst is ranked meanwhile.
            added = self.know.claim(ranks[0][0], hint)
            if key is not None and added:  # nothing to take back otherwise
                self.claims[key] = (ranks[0][0], added)
                while len(self.claims) > MAX_CLAIMS:  # requests dropped before Ray routed them
                    del self.claims[next(iter(self.claims))]
        return [[by_uid[u] for u in tier if u in by_uid] for tier in ranks if tier]

    def on_request_routed(
        self, pending_request: PendingRequest, replica_id: ReplicaID, result: ReplicaResult
    ) -> None:
        claimed = self.claims.pop(pending_request.metadata.internal_request_id, None)
        if claimed is not None and claimed[0] != replica_id.unique_id:
            self.know.unclaim(*claimed)  # the claimed replica turned it away
        # Indexed again even where it was claimed: another request's unclaim may have taken
        # back hashes this one's claim found already there.
        self.know.record_sent(replica_id.unique_id, hint_of(pending_request))

    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        super().on_replica_actor_died(replica_id)
        self.know.mark_dead(replica_id.unique_id)
        self.reported.pop(replica_id.unique_id, None)

    def update_replicas(self, replicas: list[RunningReplica]) -> None:
        super().update_replicas(replicas)
        uids = {r.replica_id.unique_id for r in replicas}
        for gone in set(self.reported) - uids:
            del self.reported[gone]
        self.know.set_live(uids, self.views())


class RayDefaultRouter(PowerOfTwoChoicesRequestRouter):
    """Ray Serve's default policy (`-router ray`, the baseline to compare against), unchanged
    for every client request. Two additions that do not route: the ingress learns the live
    replicas (for `/v1/fleet` and pinned calls), and the ingress's own pinned calls (status,
    context lists) reach the replica they name."""

    def initialize_state(self, fleet: str = "llamay", **_: Any) -> None:
        self.know = routing.knowledge(fleet)

    def views(self) -> list[routing.ReplicaView]:
        return [routing.ReplicaView(uid=r.replica_id.unique_id, load=self.replica_queue_len_cache.get(r.replica_id))
                for r in self.curr_replicas.values()]  # fmt: skip

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        pin = hint_of(pending_request).pin
        if pin is None:
            return await super().choose_replicas(candidate_replicas, pending_request)
        if pending_request is not None:
            pending_request.routing_context.should_backoff = True
        return [[r for r in candidate_replicas if r.replica_id.unique_id == pin]]

    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        super().on_replica_actor_died(replica_id)
        self.know.mark_dead(replica_id.unique_id)

    def update_replicas(self, replicas: list[RunningReplica]) -> None:
        super().update_replicas(replicas)
        self.know.set_live({r.replica_id.unique_id for r in replicas}, self.views())

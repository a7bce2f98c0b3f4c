"""What a fleet is made of: one frozen description the CLI builds and every deployment reads."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["FleetSpec", "REPLICA_HEADER", "INGRESS_NAME", "REPLICA_NAME"]

REPLICA_HEADER = "x-llamay-replica"  # names the replica that answered, on every response
INGRESS_NAME = "LlamayIngress"
REPLICA_NAME = "LlamayReplica"


@dataclass(frozen=True)
class FleetSpec:
    """`serve_argv`: `llamay serve` flags every replica runs with (no -m, no -addr); `model`:
    the -m model, resolved once where `fleet up` runs (name, file, sha256), so replicas need
    no model store of their own. `state_dir`: where replicas keep their homes and checkpoint
    their contexts (shared storage in a multi-node cluster); None: temporary homes, no
    checkpoints. `router`: "llamay" (ours) or "ray" (Ray Serve's default, for comparison)."""

    model: tuple[str, str, str | None]
    serve_argv: tuple[str, ...] = ()
    app_name: str = "llamay"
    host: str = "127.0.0.1"
    port: int = 11435
    replicas: int = 2
    cpus_per_replica: float = 1.0
    keys: str | None = None
    state_dir: str | None = None
    router: str = "llamay"
    min_replicas: int | None = None
    max_replicas: int | None = None
    target_ongoing: float | None = None
    upscale_delay: float = 5.0  # autoscaling: seconds of load before a replica is added
    downscale_delay: float = 30.0  # autoscaling: seconds of idleness before one is removed
    look_back: float = 30.0  # autoscaling: seconds of load averaged for each decision
    checkpoint_every: float = 1.0  # seconds between checkpoint passes
    stale_after: float = 4.0  # a replica silent this long is taken as dead

    @property
    def autoscaling(self) -> bool:
        return self.max_replicas is not None

    def checkpoints(self) -> Path | None:
        return Path(self.state_dir) / "checkpoints" if self.state_dir else None

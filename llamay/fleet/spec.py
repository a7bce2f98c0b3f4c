"""What a fleet is made of: one frozen description the CLI builds and every deployment reads."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..config import ServerConfig

__all__ = ["FleetSpec", "REPLICA_HEADER", "INGRESS_NAME", "REPLICA_NAME"]

REPLICA_HEADER = "x-llamay-replica"  # names the replica that answered, on every response
INGRESS_NAME = "LlamayIngress"
REPLICA_NAME = "LlamayReplica"


@dataclass(frozen=True)
class FleetSpec:
    """`server`: the `llamay serve` configuration every replica builds, as `fleet up` parsed
    it (the object itself, pickled by Ray: never a command line parsed again); each replica
    sets only its own home. Its keys (`server.keys`, `server.api_key`) are the ingress's too.
    `model`: the -m model, resolved once where `fleet up` runs (name, file, sha256), so
    replicas need no model store of their own. `host`/`port`: where the ingress listens
    (replicas do not). `state_dir`: where replicas keep their homes and checkpoint
    their contexts (shared storage in a multi-node cluster); None: temporary homes, no
    checkpoints. `router`: "llamay" (ours) or "ray" (Ray Serve's default, for comparison)."""

    model: tuple[str, str, str | None]
    server: ServerConfig = field(default_factory=ServerConfig)
    app_name: str = "llamay"
    host: str = "127.0.0.1"
    port: int = 11435
    replicas: int = 2
    cpus_per_replica: float = 1.0
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
    durable: bool = True
    ingresses: int | None = None
    # Signs checkpoints and moved contexts when there is neither $LLAMAY_SNAPSHOT_KEY nor a
    # state directory: made once where the spec is built, it reaches every replica with it.
    session_key: str = field(default_factory=lambda: secrets.token_hex(32), repr=False)

    @property
    def autoscaling(self) -> bool:
        return self.max_replicas is not None

    def replica_config(self, home: Path) -> ServerConfig:
        """What a replica whose home is `home` builds: `server`, with contexts kept there."""
        return replace(self.server, runtime=replace(self.server.runtime, home=home))

    def checkpoints(self) -> Path | None:
        return Path(self.state_dir) / "checkpoints" if self.state_dir else None

    def signing_key(self) -> bytes:
        """The key every replica signs and checks checkpoints and moved contexts with:
        $LLAMAY_SNAPSHOT_KEY's (`server.snapshot_key`), else `<state_dir>/snapshot.key`
        (0600, made on first use, so a fleet restarted on the directory trusts its own
        checkpoints), else `session_key`."""
        from ..api.state import load_key

        if self.server.snapshot_key:
            return load_key(None, self.server.snapshot_key)
        if self.state_dir:
            return load_key(Path(self.state_dir), None)
        return bytes.fromhex(self.session_key)

"""Build and run a fleet as a Ray Serve application: N replicas behind an ingress on every node.

The process that calls `run_fleet` owns the application: it deploys it, applies the scale and
down requests the ingresses receive (POST /v1/fleet/scale, /v1/fleet/down), keeps one ingress
per live node as nodes come and go, and takes the application down when it stops."""

from __future__ import annotations

import hashlib
import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from .spec import INGRESS_NAME, REPLICA_NAME, FleetSpec
from .trust import local_ray_options, private_ray_token

__all__ = ["build_app", "deploy", "live_nodes", "run_fleet", "start_ray", "wait_replicas"]

log = logging.getLogger("llamay.fleet")
ROUTER_STATS_PERIOD = 1.0  # seconds between replicas' routing stats (models, contexts, load)
NODE_CHECK_EVERY = 2.0  # seconds between `run_fleet`'s looks at which nodes are up


def _replica_options(spec: FleetSpec) -> dict[str, Any]:
    from ray.serve.config import RequestRouterConfig

    opts: dict[str, Any] = {
        "name": REPLICA_NAME,
        "ray_actor_options": {"num_cpus": spec.cpus_per_replica},
        # A replica answers many requests at once (its engine batches them); Ray's queue
        # beyond that is what a full replica's 503 would otherwise be.
        "max_ongoing_requests": 64,
        "graceful_shutdown_timeout_s": 120,
        "graceful_shutdown_wait_loop_s": 0.5,
        "health_check_period_s": 2,
        "health_check_timeout_s": 30,
    }
    # Both routers are ours to name: "ray" is Ray's default policy, unchanged, in a class
    # that also tells the ingress which replicas are live (for /v1/fleet and pinned calls).
    cls = "LlamayRouter" if spec.router == "llamay" else "RayDefaultRouter"
    router: dict[str, Any] = {
        "request_router_class": f"llamay.fleet.router.{cls}",
        "request_router_kwargs": {"fleet": spec.app_name},
    }
    if spec.router == "llamay":
        router["request_routing_stats_period_s"] = ROUTER_STATS_PERIOD
        router["request_routing_stats_timeout_s"] = 5.0
    opts["request_router_config"] = RequestRouterConfig(**router)
    if spec.autoscaling:
        opts["autoscaling_config"] = {
            "min_replicas": spec.min_replicas if spec.min_replicas is not None else 1,
            "max_replicas": spec.max_replicas,
            "initial_replicas": spec.replicas,
            "target_ongoing_requests": spec.target_ongoing or 4,
            "upscale_delay_s": spec.upscale_delay,
            "downscale_delay_s": spec.downscale_delay,
            "look_back_period_s": spec.look_back,
        }
    else:
        opts["num_replicas"] = spec.replicas
    return opts


def build_app(spec: FleetSpec) -> Any:
    """The Ray Serve application of `spec` (bound, not yet running)."""
    from ray import serve

    from .ingress import LlamayIngress
    from .replica import LlamayReplica

    # The deployments' arguments and versions leave the replica and ingress counts out:
    # with the same version a scale only changes num_replicas, and Ray restarts neither the
    # replicas nor the ingresses. serve.run gives a deployment without a version a random
    # one (a rolling update on every call), and Ray 2.60's options() no longer takes one, so
    # it is set on the attribute serve.run reads (`tests/fleet/test_ray_surface.py`).
    same = replace(spec, replicas=0, ingresses=None)
    version = hashlib.sha256(repr(same).encode()).hexdigest()[:16]
    deployment: Any = serve.deployment  # its overloads hide .options from mypy
    replica = deployment(LlamayReplica).options(**_replica_options(spec))
    ingress = deployment(LlamayIngress).options(
        name=INGRESS_NAME,
        # One per node, as Ray Serve's own proxies run: a client (or a load balancer) that
        # can reach any live node reaches the fleet. They share no state of their own: what
        # routing knows comes from the replicas' reports (`replica.record_routing_stats`).
        num_replicas=ingress_count(spec),
        max_replicas_per_node=1,
        ray_actor_options={"num_cpus": 0},
        max_ongoing_requests=1000,
        health_check_period_s=2,  # also what starts context recovery (check_health)
    )
    replica._version = ingress._version = version
    return ingress.bind(replica.bind(same), same)


def live_nodes() -> int:
    """Nodes of the Ray cluster that are up now (1 when Ray is not running here)."""
    import ray

    if not ray.is_initialized():
        return 1
    return max(1, sum(1 for n in ray.nodes() if n.get("Alive")))


def ingress_count(spec: FleetSpec) -> int:
    return spec.ingresses if spec.ingresses is not None else live_nodes()


def start_ray(
    num_cpus: int | None = None, temp_dir: str | None = None, env: dict[str, str] | None = None
) -> None:
    """Join the cluster in RAY_ADDRESS, or start a local one (no dashboard, bound to
    127.0.0.1, its token file 0600: `trust`). `env` reaches every worker (the model store's
    home, thread settings; keys travel in the spec)."""
    import os

    import ray

    runtime_env = {"env_vars": env} if env else None
    if os.environ.get("RAY_ADDRESS"):
        ray.init(address=os.environ["RAY_ADDRESS"], runtime_env=runtime_env, log_to_driver=False)
    else:
        # A cluster of our own serves this machine only: Ray's ports on the loopback address,
        # its token file private (before Ray would write it with the default mode).
        kw: dict[str, Any] = {**local_ray_options(), "log_to_driver": False}
        if num_cpus is not None:
            kw["num_cpus"] = num_cpus
        if temp_dir:
            kw["_temp_dir"] = temp_dir
        token = private_ray_token()
        ray.init(runtime_env=runtime_env, **kw)
        if token is not None and token.exists():
            os.chmod(token, 0o600)


def deploy(spec: FleetSpec) -> Any:
    """Run the application and open its HTTP endpoint on spec.host:port; its ingress handle.

    The ingress serves HTTP itself: Ray Serve's proxy would be one more process between the
    client and the ingress (measured: ~6 ms of the hop's ~13 ms), so Serve runs without it."""
    from ray import serve

    serve.start(proxy_location="Disabled")
    spec.signing_key()  # made here first: replicas then read the state directory's key
    handle = _run(spec)
    handle.serve_http.remote().result(timeout_s=60)
    return handle


def _run(spec: FleetSpec) -> Any:
    from ray import serve

    return serve.run(build_app(spec), name=spec.app_name, route_prefix="/", blocking=False)


def run_fleet(spec: FleetSpec, on_ready: Callable[[], None] | None = None, poll: float = 0.5) -> int:
    """Deploy and own the fleet until SIGINT/SIGTERM or a /v1/fleet/down request; then take
    it down. Scale requests redeploy with the new replica count (Ray changes only that)."""
    import ray
    from ray import serve

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    follow_nodes = spec.ingresses is None  # one ingress per live node, as nodes come and go
    spec = replace(spec, ingresses=ingress_count(spec))
    handle = deploy(spec)
    if on_ready:
        on_ready()
    checked = time.monotonic()
    try:
        while not stop.wait(poll):
            if follow_nodes and time.monotonic() - checked >= NODE_CHECK_EVERY:
                checked = time.monotonic()
                nodes = live_nodes()
                if nodes != spec.ingresses:
                    log.info("nodes changed", extra={"nodes": nodes, "ingresses": spec.ingresses})
                    spec = replace(spec, ingresses=nodes)
                    handle = _run(spec)
            try:
                wanted = handle.take_control.remote().result(timeout_s=10)
            except Exception:
                continue
            if wanted.get("down"):
                break
            if "replicas" in wanted:
                spec = replace(spec, replicas=int(wanted["replicas"]))
                log.info("scaling", extra={"replicas": spec.replicas})
                handle = _run(spec)
    finally:
        try:
            try:
                handle.prepare_down.remote().result(timeout_s=30)
            except Exception:
                log.warning("replicas were not told the fleet is going down")
            serve.delete(spec.app_name)
            serve.shutdown()
        finally:
            ray.shutdown()
    return 0


def wait_replicas(handle: Any, n: int, timeout: float = 180.0) -> list[dict[str, Any]]:
    """Block until the fleet reports `n` live replicas; their status rows."""
    deadline = time.monotonic() + timeout
    rows: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        try:
            rows = handle.status.remote().result(timeout_s=30)["replicas"]
        except Exception:
            rows = []
        if len(rows) == n and all("error" not in r for r in rows):
            return rows
        time.sleep(0.5)
    raise TimeoutError(f"the fleet has {len(rows)} replicas, not {n}, after {timeout}s")

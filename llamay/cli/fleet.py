"""`llamay fleet`: llamay replicas on Ray Serve (`pip install 'llamay[fleet]'`).

`fleet up` starts a local Ray cluster (or joins the one in RAY_ADDRESS), deploys the replicas
and the ingress, and stays in the foreground owning them, its address recorded in the llamay
home (`fleet.json`) while it runs; `status`, `scale` and `down` talk to the ingress over HTTP
(/v1/fleet, admin) like `llamay ctx` does, at -host, else at the recorded fleet's address."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from .common import check_response, fail, flag, host_flags, server_url
from .serve import add_server_flags, config_from_args

if TYPE_CHECKING:
    from ..config import ServerConfig
    from ..fleet.spec import FleetSpec

__all__ = ["add_parser", "fleet_spec", "recorded_fleet"]

RECORD = "fleet.json"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "fleet",
        help="run llamay replicas on Ray Serve",
        allow_abbrev=False,
        description="A fleet of llamay replicas on Ray Serve, routed by context, prefix and model.",
    )
    verbs = p.add_subparsers(dest="fleet_verb", metavar="VERB", required=True)
    up = verbs.add_parser("up", help="start the fleet (stays in the foreground)", allow_abbrev=False)
    flag(up, "replicas", type=int, default=2, help="replicas to start (default 2)")
    flag(up, "state", type=Path, default=None,
         help="directory for replica homes and context checkpoints (shared storage across nodes); "
              "with it, a dead replica's contexts are restored on another")  # fmt: skip
    flag(up, "cpus-per-replica", dest="cpus_per_replica", type=float, default=1.0,
         help="Ray CPUs each replica reserves (default 1)")  # fmt: skip
    flag(up, "min-replicas", dest="min_replicas", type=int, default=None, help="autoscaling: fewest replicas")
    flag(up, "max-replicas", dest="max_replicas", type=int, default=None,
         help="autoscaling: most replicas (setting it turns autoscaling on)")  # fmt: skip
    flag(up, "target-ongoing", dest="target_ongoing", type=float, default=None,
         help="autoscaling: requests per replica to aim for (default 4)")  # fmt: skip
    flag(up, "router", default="llamay", choices=["llamay", "ray"],
         help="llamay (context, prefix and model affinity) or ray (Ray Serve's default)")  # fmt: skip
    flag(up, "ray-cpus", dest="ray_cpus", type=int, default=None, help="CPUs of a local Ray cluster")
    flag(up, "durable", default="on", choices=["on", "off"],
         help="with -state: answer a context change only once it is saved there (default on); "
              "off: saved within a second")  # fmt: skip
    flag(up, "ingresses", type=int, default=None,
         help="HTTP endpoints, at most one per node (default: one on every node, following nodes "
              "as they come and go)")  # fmt: skip
    # Every serve flag: each replica builds the ServerConfig they make (see fleet_spec).
    add_server_flags(up, {"model": "model name or .gguf path (default: smollm2:135m)",
                          "addr": "HOST:PORT of the fleet's HTTP endpoint",
                          "keys": "API keys file, used by every replica (and /v1/fleet)"})  # fmt: skip
    up.set_defaults(func=run_up)

    def remote(name: str, help_: str) -> argparse.ArgumentParser:
        v: argparse.ArgumentParser = verbs.add_parser(name, help=help_, allow_abbrev=False, description=help_)
        host_flags(v, "the fleet (default: the one `fleet up` started from this llamay home)")
        return v

    remote("status", "replicas: node, model, running/queued, KV use, cached cells, contexts").set_defaults(
        func=run_status
    )
    v = remote("scale", "set the number of replicas (scaling down moves contexts first)")
    v.add_argument("replicas", type=int)
    v.set_defaults(func=run_scale)
    remote("down", "stop the fleet (the `fleet up` process exits)").set_defaults(func=run_down)


def _record_path() -> Path:
    from ..store.layout import llamay_home

    return llamay_home() / RECORD


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def recorded_fleet() -> str | None:
    """The URL of the fleet `fleet up` runs from this llamay home, if its process lives."""
    try:
        record = json.loads(_record_path().read_text())
    except (OSError, ValueError):
        return None
    if (
        not isinstance(record, dict)
        or not _alive(record.get("pid"))
        or not isinstance(record.get("url"), str)
    ):
        return None
    return str(record["url"])


def _record(host: str, port: int) -> None:
    """Note where this `fleet up` listens (a wildcard address is reached on loopback)."""
    reach = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    reach = f"[{reach}]" if ":" in reach else reach
    path = _record_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"url": f"http://{reach}:{port}", "pid": os.getpid()}))
    tmp.replace(path)


def _unrecord() -> None:
    """Remove the record if it is this process's own (a later fleet may have replaced it)."""
    path = _record_path()
    with contextlib.suppress(OSError, ValueError):
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()


def _client(args: argparse.Namespace) -> httpx.Client:
    """The fleet's address: -host, else the running fleet recorded in the llamay home,
    else $LLAMAY_HOST / $LLAMAY_URL, else localhost:11435."""
    headers = {"Authorization": f"Bearer {args.key}"} if args.key else {}
    url = server_url(args.host or recorded_fleet())
    return httpx.Client(base_url=url, headers=headers, timeout=120)


def _check(r: httpx.Response) -> dict[str, Any]:
    out: dict[str, Any] = check_response(r).json()
    return out


def run_status(args: argparse.Namespace) -> int:
    with _client(args) as c:
        data = _check(c.get("/v1/fleet"))
    print(
        f"{'REPLICA':<10} {'NODE':<10} {'MODEL':<18} {'RUN':>4} {'QUEUE':>5} {'KV':>7} {'CACHED':>7} {'CTXS':>5}"
    )
    for r in data["replicas"]:
        if "error" in r:
            print(f"{r['replica']:<10} unreachable: {r['error']}")
            continue
        for m in r["models"] or [{"name": "-", "running": 0, "queued": 0, "kv_cells": 0, "cache_cells": 0}]:
            print(f"{r['replica']:<10} {r['node'][:8]:<10} {m['name']:<18} {m['running']:>4} {m['queued']:>5} "
                  f"{m['kv_cells']:>7} {m['cache_cells']:>7} {r['contexts']:>5}")  # fmt: skip
    return 0


def run_scale(args: argparse.Namespace) -> int:
    with _client(args) as c:
        _check(c.post("/v1/fleet/scale", json={"replicas": args.replicas}))
    print(f"scaling to {args.replicas} replicas", file=sys.stderr)
    return 0


def run_down(args: argparse.Namespace) -> int:
    with _client(args) as c:
        _check(c.post("/v1/fleet/down"))
    return 0


def fleet_spec(args: argparse.Namespace, config: ServerConfig | None = None) -> FleetSpec:
    """The fleet `fleet up`'s flags describe: the serve flags as the `ServerConfig` every
    replica builds (shipped as it is, never as a command line), the -m model resolved once
    here (replicas need no model store of their own to find it). ConfigError naming the
    flag for a bad value. `config`: the serve flags' config, when parsed already."""
    from ..config import ConfigError
    from ..fleet.spec import FleetSpec
    from .common import resolve_model

    config = config or config_from_args(args)
    if args.replicas < 1:
        raise ConfigError("-replicas must be at least 1")
    if args.ingresses is not None and args.ingresses < 1:
        raise ConfigError("-ingresses must be at least 1")
    name, path, sha = resolve_model(config.model)
    if args.state:
        args.state.mkdir(parents=True, exist_ok=True)
    return FleetSpec(
        model=(name, str(path.resolve()), sha),
        server=config,
        host=config.host,
        port=config.port,
        replicas=args.replicas,
        cpus_per_replica=args.cpus_per_replica,
        state_dir=str(args.state.resolve()) if args.state else None,
        router=args.router,
        min_replicas=args.min_replicas,
        max_replicas=args.max_replicas,
        target_ongoing=args.target_ongoing,
        durable=args.durable == "on",
        ingresses=args.ingresses,
    )


def run_up(args: argparse.Namespace) -> int:
    from .logs import setup_logging

    try:
        config = config_from_args(args)
    except Exception as exc:
        return fail(exc)
    setup_logging(config.log_level)
    try:
        from ..fleet.app import run_fleet, start_ray
    except ImportError as exc:
        return fail(RuntimeError(f"the fleet needs Ray Serve: pip install 'llamay[fleet]' ({exc})"))
    try:
        spec = fleet_spec(args, config)
    except Exception as exc:
        return fail(exc)
    # The store's home reaches every worker (the keys travel in the spec's config).
    env = {k: os.environ[k] for k in ("LLAMAY_HOME",) if k in os.environ}
    start_ray(num_cpus=args.ray_cpus, env=env)
    name, host, port = spec.model[0], spec.host, spec.port

    def ready() -> None:
        _record(host, port)
        print(f"llamay fleet: {args.replicas} replicas of {name} at http://{host}:{port} "
              f"(router: {args.router}); `llamay fleet down` or Ctrl-C stops it", file=sys.stderr, flush=True)  # fmt: skip

    try:
        return run_fleet(spec, on_ready=ready)
    finally:
        _unrecord()

"""The fleet runs on Ray Serve's public request-router API (`ray.serve.request_router`) and
two parts that are not public: Ray's power-of-two-choices router, which `-router ray`
subclasses, and a deployment's `_version`, which keeps a scale from restarting replicas.
So Ray is pinned to one version (pyproject's `fleet` extra), and these tests fail, naming
the part, when an upgrade moves any of them."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import ray
from ray import serve
from ray.serve import request_router as public

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_ray_is_the_version_the_fleet_is_pinned_to() -> None:
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]["fleet"]
    (pin,) = [re.fullmatch(r"ray\[serve\]==([\d.]+)", e) for e in extras if e.startswith("ray")]
    assert pin is not None, f"the fleet extra must pin Ray exactly: {extras}"
    assert ray.__version__ == pin.group(1), "Ray moved: re-check the private parts below, then the pin"


def test_the_private_power_of_two_router_is_still_there() -> None:
    from ray.serve._private.request_router.pow_2_router import PowerOfTwoChoicesRequestRouter

    assert issubclass(PowerOfTwoChoicesRequestRouter, public.RequestRouter)
    for hook in ("choose_replicas", "on_replica_actor_died", "update_replicas"):
        assert callable(getattr(PowerOfTwoChoicesRequestRouter, hook, None)), hook


def test_the_router_surface_we_use_is_public() -> None:
    """Names our routers use on Ray's objects; each is part of the documented surface."""
    for name in ("FIFOMixin", "PendingRequest", "ReplicaID", "RequestRouter", "RunningReplica"):
        assert name in public.__all__, name
    for hook in ("initialize_state", "choose_replicas", "on_request_routed", "on_replica_actor_died",
                 "update_replicas"):  # fmt: skip
        assert callable(getattr(public.RequestRouter, hook, None)), hook
    for prop in ("curr_replicas", "replica_queue_len_cache"):
        assert isinstance(getattr(public.RequestRouter, prop, None), property), prop
    # A documented field of the public PendingRequest; its class is not exported itself.
    context = public.PendingRequest.__dataclass_fields__["routing_context"].default_factory()  # type: ignore[misc]
    assert hasattr(context, "should_backoff")
    for attr in ("routing_stats", "replica_id"):
        assert isinstance(getattr(public.RunningReplica, attr, None), property), attr


def test_a_version_set_on_the_attribute_reaches_the_built_deployment() -> None:
    from ray.serve._private.build_app import build_app

    class Thing:
        def __call__(self) -> str:
            return "ok"

    deployment = serve.deployment(Thing).options(name="thing", num_replicas=2)
    deployment._version = "v-pinned"
    built = build_app(deployment.bind(), name="app")
    (only,) = built.deployments
    assert only.version == "v-pinned", "serve.run no longer reads Deployment._version"

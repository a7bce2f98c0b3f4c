"""The Ray Serve options a fleet spec becomes (no cluster needed)."""

from __future__ import annotations

from dataclasses import replace

from llamay.cli.fleet import serve_argv
from llamay.cli.main import build_parser
from llamay.fleet.app import _replica_options, build_app
from llamay.fleet.spec import FleetSpec

SPEC = FleetSpec(model=("tiny", "/m.gguf", None), replicas=2)


def test_autoscaling_flags_become_ray_serve_autoscaling() -> None:
    args = build_parser().parse_args(["fleet", "up", "-min-replicas", "1", "-max-replicas", "4",
                                      "-target-ongoing", "3", "-ctx", "2048", "-threads", "1"])  # fmt: skip
    spec = replace(SPEC, min_replicas=args.min_replicas, max_replicas=args.max_replicas,
                   target_ongoing=args.target_ongoing, serve_argv=serve_argv(args))  # fmt: skip
    opts = _replica_options(spec)
    assert "num_replicas" not in opts
    assert opts["autoscaling_config"] == {**opts["autoscaling_config"], "min_replicas": 1, "max_replicas": 4,
                                          "initial_replicas": 2, "target_ongoing_requests": 3}  # fmt: skip
    assert set(spec.serve_argv) >= {"--ctx", "2048", "--threads", "1"}
    assert _replica_options(SPEC)["num_replicas"] == 2


def test_our_router_unless_asked_for_rays_own() -> None:
    ours = _replica_options(SPEC)["request_router_config"]
    assert ours.request_router_class.endswith(".LlamayRouter")
    # -router ray: Ray's default policy, in our subclass that only keeps the ingress informed
    from ray.serve._private.request_router.pow_2_router import PowerOfTwoChoicesRequestRouter

    from llamay.fleet.router import LlamayRouter, RayDefaultRouter

    theirs = _replica_options(replace(SPEC, router="ray"))["request_router_config"]
    assert theirs.request_router_class.endswith(".RayDefaultRouter")
    assert RayDefaultRouter.__mro__[1] is PowerOfTwoChoicesRequestRouter
    assert not issubclass(LlamayRouter, PowerOfTwoChoicesRequestRouter)


def test_a_scale_changes_only_the_replica_count() -> None:
    a, b = build_app(SPEC), build_app(replace(SPEC, replicas=5))
    assert a._bound_deployment._version == b._bound_deployment._version

"""The Ray Serve options a fleet spec becomes (no cluster needed)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from dataclasses import replace
from pathlib import Path

import pytest
from ray import cloudpickle

from llamay.cli.main import build_parser
from llamay.cli.serve import config_from_args
from llamay.fleet.app import _replica_options, build_app
from llamay.fleet.spec import FleetSpec

SPEC = FleetSpec(model=("tiny", "/m.gguf", None), replicas=2)


def test_autoscaling_flags_become_ray_serve_autoscaling() -> None:
    args = build_parser().parse_args(["fleet", "up", "-min-replicas", "1", "-max-replicas", "4",
                                      "-target-ongoing", "3", "-ctx", "2048", "-threads", "1"])  # fmt: skip
    spec = replace(SPEC, min_replicas=args.min_replicas, max_replicas=args.max_replicas,
                   target_ongoing=args.target_ongoing, server=config_from_args(args))  # fmt: skip
    opts = _replica_options(spec)
    assert "num_replicas" not in opts
    assert opts["autoscaling_config"] == {**opts["autoscaling_config"], "min_replicas": 1, "max_replicas": 4,
                                          "initial_replicas": 2, "target_ongoing_requests": 3}  # fmt: skip
    assert (spec.server.runtime.ctx, spec.server.runtime.threads) == (2048, 1)
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


# Ray awaits a replica's async __del__; here the garbage collector calls it once more, unawaited.
@pytest.mark.filterwarnings("ignore:coroutine 'LlamayReplica.__del__' was never awaited")
def test_a_replica_builds_exactly_the_config_fleet_up_parsed(
    tiny_model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `fleet up` parses is what each replica builds: the same object after Ray's
    pickling (an on/off flag included), and a server `llamay serve` would run with those flags."""
    import llamay.fleet.replica as replica_mod
    from llamay.api.state import state_of
    from llamay.cli.fleet import fleet_spec

    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"keys": [{"key": "k-root", "principal": "root", "role": "admin"}]}))
    monkeypatch.setenv("LLAMAY_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LLAMAY_API_KEY", "k-env-admin")
    serve_flags = ["-m", str(tiny_model_path), "-flash-attn", "off", "-ctx", "512", "-threads", "1",
                   "-concurrency", "3", "-temp", "0.5", "-finish-tool", "auto", "-max-loaded", "3",
                   "-keepalive", "90s", "-body-timeout", "30s", "-cache-ram", "0", "-keys", str(keys),
                   "-draft-max", "3", "-draft", str(tiny_model_path)]  # fmt: skip
    as_serve = config_from_args(build_parser().parse_args(["serve", *serve_flags]))
    spec = fleet_spec(build_parser().parse_args(["fleet", "up", "-replicas", "1", "-state", str(tmp_path / "state"),
                                                 *serve_flags]))  # fmt: skip
    shipped = cloudpickle.loads(cloudpickle.dumps(spec))  # as Ray hands deployment arguments over
    assert shipped.server == as_serve and shipped.server.runtime.flash_attn is False
    assert shipped.server.api_key == "k-env-admin" and "k-env-admin" not in repr(shipped)

    monkeypatch.setattr(replica_mod, "_replica_id", lambda: ("r1", "node1"))
    replica = replica_mod.LlamayReplica(shipped)
    try:
        state = state_of(replica.app)
        assert replica.home == tmp_path / "state" / "replicas" / "r1"
        assert replica.runtime.config == dataclasses.replace(as_serve.runtime, home=replica.home)
        assert (replica.runtime.max_loaded, replica.runtime.keep_alive) == (3, 90.0)
        assert state.limits == as_serve.limits and state.keys.enabled
        assert {state.keys.authenticate(k).name for k in ("k-root", "k-env-admin")} == {"root", "admin"}
        lm = replica.runtime.get(None)
        assert lm.ctx.config.flash_attn is False and lm.engine.n_ctx == 512 and lm.ctx.config.n_threads == 1
        spec = lm.engine.speculator  # speculation, with the draft model, on every replica
        assert spec.config.enabled and spec.config.max_draft == 3 and spec.drafter is not None
    finally:
        asyncio.run(replica.__del__())  # the replica's own stop, as Ray runs it

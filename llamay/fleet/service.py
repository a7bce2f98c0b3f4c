"""The fleet as a Ray Serve application that a cluster manager deploys (KubeRay's
`RayService`, `serve deploy`), instead of `llamay fleet up`.

`serveConfigV2` names `import_path: llamay.fleet.service:app` with `args: {argv: [...]}`:
the `fleet up` flags, parsed once here into the `FleetSpec` every deployment reads (as
`fleet up` does; never a command line again). There is no `fleet up` process: the number of
ingresses is `-ingresses` (default: the nodes up when the application deploys), and
`fleet scale`/`fleet down` are the manifest's to decide (`/v1/fleet/scale` and `/down` are
accepted and do nothing). See docs/fleet.md."""

from __future__ import annotations

from typing import Any

from .app import build_app
from .spec import FleetSpec

__all__ = ["app", "spec_from_argv"]


def spec_from_argv(argv: list[str]) -> FleetSpec:
    """The FleetSpec `llamay fleet up ARGV` would run; ConfigError (or SystemExit from the
    parser, with its message) for bad flags."""
    from ..cli.fleet import fleet_spec
    from ..cli.main import build_parser

    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise ValueError("args.argv must be a list of strings: the `llamay fleet up` flags")
    args = build_parser().parse_args(["fleet", "up", *argv])
    return fleet_spec(args)


def app(args: dict[str, Any]) -> Any:
    """Ray Serve's application builder: `args` is the manifest's `args` mapping."""
    spec = spec_from_argv(list(args.get("argv") or []))
    spec.signing_key()  # made now (in the state directory): replicas read it from there
    return build_app(spec)

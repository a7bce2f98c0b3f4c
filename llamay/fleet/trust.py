"""What a fleet keeps private, and what it believes of a checkpoint.

A fleet's state directory holds every tenant's contexts (checkpoints, replica homes): its
folders are made 0700 and its files 0600. Checkpoints and drained contexts are snapshots
signed with the fleet's key (`FleetSpec.signing_key`); a replica restores a signed one as its
header says (owner, prefix-cache namespace) and anything else as no tenant's: owned by no one
(admins only, with keys on) in a namespace no request attaches to, so a file dropped into the
checkpoint folder can neither reach another tenant's cache nor claim a principal's context.

A fleet that starts its own Ray cluster binds it to this machine only (`LOCAL_HOST`, through
Ray's single-machine mode: `local_ray_options`) and keeps
Ray's cluster token (`~/.ray/auth_token`, or `$RAY_AUTH_TOKEN_PATH`) readable by its owner only:
whoever can reach Ray's ports with the token can run code in the cluster."""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
from pathlib import Path
from typing import Any

from ..kv.snapshot import SnapshotHeader
from ..kv.storelock import write_atomic

__all__ = [
    "LOCAL_HOST",
    "UNSIGNED_NAMESPACE",
    "private_dir",
    "write_private",
    "trusted_origin",
    "ray_token_path",
    "private_ray_token",
    "local_ray_options",
]

LOCAL_HOST = "127.0.0.1"
RAY_CLUSTER_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # "0": Ray's single-machine mode
# The namespace of a restored snapshot that no key of this fleet signed: no principal's.
UNSIGNED_NAMESPACE = "fleet:unsigned"


def private_dir(path: Path) -> Path:
    """`path` as a folder only its owner may enter (made 0700, or set so if it exists)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def write_private(path: Path, data: bytes) -> None:
    """Replace `path` atomically with `data`, mode 0600 (a crash leaves the old or the new)."""
    write_atomic(path, data, durable=False)


def trusted_origin(header: SnapshotHeader, signed: bool) -> tuple[str | None, str]:
    """(owner, namespace) to restore a fleet snapshot with: the header's when the fleet's
    key signed it, else no owner in `UNSIGNED_NAMESPACE`."""
    if signed:
        return header.owner, header.namespace or ""
    return None, UNSIGNED_NAMESPACE


def ray_token_path() -> Path:
    return Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")


def private_ray_token() -> Path | None:
    """Make Ray's token file private before a local cluster starts: created 0600 (in a 0700
    folder) when missing, set to 0600 when it exists. None when Ray's token auth is off or
    the token comes from the environment (no file)."""
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "disabled" or os.environ.get("RAY_AUTH_TOKEN"):
        return None
    path = ray_token_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        os.chmod(path, 0o600)
        return path
    with os.fdopen(fd, "w") as f:
        f.write(_new_token())
    return path


def _new_token() -> str:
    with contextlib.suppress(ImportError):
        from ray._private.authentication.authentication_token_generator import (
            generate_new_authentication_token,
        )

        return str(generate_new_authentication_token())
    return secrets.token_hex(16)


def local_ray_options() -> dict[str, Any]:
    """`ray.init` options for a cluster started here: no dashboard, every Ray process on
    the loopback address. Ray takes a node's address as the one other machines reach it by
    (127.0.0.1 passed to `ray.init` is replaced by it) and its GCS and raylet listen on every
    interface, except in its single-machine mode (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`, the
    default on macOS and Windows), where the node is 127.0.0.1 and every server binds there:
    set here for this process and the Ray processes it starts."""
    os.environ[RAY_CLUSTER_ENV] = "0"
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None:  # read at Ray's import; later lookups read the attribute
        setattr(constants, "ENABLE_RAY_CLUSTER", False)  # noqa: B010
    return {"include_dashboard": False, "_node_ip_address": LOCAL_HOST, "dashboard_host": LOCAL_HOST}

"""What a fleet keeps private and what it believes: Ray bound to the loopback address with a
private token file, checkpoints 0600 in 0700 folders, one signing key per fleet, unsigned
headers trusted for nothing; and `llamay ctx move` keeping the source's key to itself."""

from __future__ import annotations

import os
import stat
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from llamay.cli.ctx import target_key
from llamay.config import ServerConfig
from llamay.fleet import app as fleet_app
from llamay.fleet.checkpoint import Checkpoints, saved
from llamay.fleet.spec import FleetSpec
from llamay.fleet.trust import UNSIGNED_NAMESPACE, private_ray_token, trusted_origin
from llamay.kv.snapshot import SnapshotHeader, read_signed, write_snapshot
from llamay.kv.storelock import write_atomic


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def header(owner: str | None, namespace: str | None) -> SnapshotHeader:
    return SnapshotHeader(
        model_name="m", model_sha256="", tokens=[1, 2, 3], owner=owner, marking=None, created=0.0,
        namespace=namespace,
    )  # fmt: skip


# -- Ray -------------------------------------------------------------------------------------


class FakeRay(types.ModuleType):
    def __init__(self, token: Path) -> None:
        super().__init__("ray")
        self.calls: list[dict[str, Any]] = []
        self.token = token

    def init(self, **kw: Any) -> None:
        self.calls.append(kw)
        if "address" not in kw:  # a new local cluster: Ray writes its token, default mode
            self.token.write_text("rewritten by ray")
            self.token.chmod(0o644)


@pytest.fixture()
def token_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ray" / "auth_token"
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(path))
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return path


def test_a_local_cluster_listens_on_loopback_and_keeps_its_token_private(
    token_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ray's node address decides where its GCS and raylet listen; it is 127.0.0.1 only in
    Ray's single-machine mode (checked by hand with `ss -ltnp`: every Ray port on 127.0.0.1
    with it, on all interfaces without it)."""
    fake = FakeRay(token_path)
    constants = types.SimpleNamespace(ENABLE_RAY_CLUSTER=True)  # Ray imported already
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.setitem(sys.modules, "ray._private.ray_constants", constants)
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "1")
    fleet_app.start_ray(num_cpus=2)
    (kw,) = fake.calls
    assert os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0" and constants.ENABLE_RAY_CLUSTER is False
    assert kw["_node_ip_address"] == "127.0.0.1" and kw["dashboard_host"] == "127.0.0.1"
    assert kw["include_dashboard"] is False and kw["num_cpus"] == 2
    assert mode(token_path) == 0o600 and mode(token_path.parent) == 0o700


def test_joining_a_cluster_sets_no_local_options(token_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeRay(token_path)
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "1")
    fleet_app.start_ray()
    (kw,) = fake.calls
    assert kw["address"] == "10.0.0.5:6379" and "_node_ip_address" not in kw
    assert os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "1"


def test_the_token_file_is_made_private_before_ray_starts(token_path: Path) -> None:
    made = private_ray_token()
    assert made == token_path and mode(token_path) == 0o600 and len(token_path.read_text()) >= 16
    first = token_path.read_text()
    token_path.chmod(0o644)  # an existing token Ray wrote earlier
    assert private_ray_token() == token_path and mode(token_path) == 0o600
    assert token_path.read_text() == first  # kept, not replaced


def test_no_token_file_when_ray_auth_is_off(token_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert private_ray_token() is None and not token_path.exists()


# -- checkpoints -----------------------------------------------------------------------------


def test_checkpoints_are_private(tmp_path: Path) -> None:
    ck = Checkpoints(tmp_path / "state" / "checkpoints", "r1")
    ck.write("ctx_a", b"snapshot bytes")
    ck.heartbeat()
    assert mode(tmp_path / "state" / "checkpoints") == 0o700 and mode(ck.folder) == 0o700
    assert all(mode(f) == 0o600 for f in ck.folder.iterdir())
    assert [cid for cid, _ in saved(ck.folder)] == ["ctx_a"]
    assert not [f for f in ck.folder.iterdir() if f.name.endswith(".tmp")]


def test_a_fleet_has_one_signing_key(tmp_path: Path) -> None:
    spec = FleetSpec(model=("m", "/m.gguf", None), state_dir=str(tmp_path / "state"))
    key = spec.signing_key()
    assert mode(tmp_path / "state" / "snapshot.key") == 0o600
    # Every replica (each an unpickled copy of the spec) and a fleet restarted on the
    # directory get the same key; without a directory the spec's own key travels with it.
    assert FleetSpec(model=spec.model, state_dir=spec.state_dir).signing_key() == key
    bare = FleetSpec(model=("m", "/m.gguf", None))
    assert bare.signing_key() == bare.signing_key() != FleetSpec(model=bare.model).signing_key()
    given = ServerConfig(snapshot_key="a fleet-wide snapshot key")
    assert FleetSpec(model=spec.model, server=given, state_dir=spec.state_dir).signing_key() != key
    assert bare.session_key not in repr(bare)


def test_only_a_signed_header_is_trusted_for_owner_and_namespace(tmp_path: Path) -> None:
    key = FleetSpec(model=("m", "/m.gguf", None), state_dir=str(tmp_path)).signing_key()
    claim = header("ann", "g:team-a")
    for data, trusted in (
        (write_snapshot(claim, b"state", key), True),
        (write_snapshot(claim, b"state"), False),  # unsigned
        (write_snapshot(claim, b"state", b"k" * 32), False),  # another key's
    ):
        got, _, signed = read_signed(data, key)
        assert signed is trusted
        owner, namespace = trusted_origin(got, signed)
        assert (owner, namespace) == (("ann", "g:team-a") if trusted else (None, UNSIGNED_NAMESPACE))


def test_non_durable_atomic_writes_are_private(tmp_path: Path) -> None:
    write_atomic(tmp_path / "spill.llamayctx", b"kv", durable=False)
    assert mode(tmp_path / "spill.llamayctx") == 0o600


# -- ctx move --------------------------------------------------------------------------------


def test_ctx_move_sends_the_source_key_only_to_the_source() -> None:
    src = "http://a.example:11435"
    assert target_key(src, "http://b.example:11435", "src-key", None) is None
    assert target_key(src, "http://a.example:11436", "src-key", None) is None
    assert target_key(src, "http://b.example:11435", "src-key", "dst-key") == "dst-key"
    assert target_key(src, "http://a.example:11435/", "src-key", None) == "src-key"  # the same server

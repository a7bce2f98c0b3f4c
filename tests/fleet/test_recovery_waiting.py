"""Which context requests wait (503 + Retry-After) while a lost replica's contexts come back,
rather than meeting a 404: read from the state directory, without Ray."""

from __future__ import annotations

from pathlib import Path

from llamay.fleet.checkpoint import SUFFIX
from llamay.fleet.recovery import Recovery
from llamay.fleet.routing import FleetKnowledge, ReplicaView
from llamay.fleet.spec import FleetSpec

CID = "ctx_" + "ab" * 12


def recovery(tmp_path: Path, live: list[str]) -> Recovery:
    know = FleetKnowledge()
    rec = Recovery(FleetSpec(model=("tiny", "/m.gguf", None), state_dir=str(tmp_path)), know, None)
    know.set_live(set(live), [ReplicaView(u) for u in live])
    rec._pending.clear()  # as after a sweep's scan that has not yet seen the newest file
    return rec


def checkpoint(tmp_path: Path, replica: str, cid: str) -> None:
    folder = tmp_path / "checkpoints" / replica
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{cid}{SUFFIX}").write_bytes(b"x")


def test_an_id_no_ingress_learned_waits_while_a_lost_replica_holds_its_checkpoint(tmp_path: Path) -> None:
    checkpoint(tmp_path, "gone", CID)
    assert recovery(tmp_path, ["alive"]).waiting(CID)


def test_an_id_checkpointed_nowhere_or_by_a_live_replica_does_not_wait(tmp_path: Path) -> None:
    assert not recovery(tmp_path, ["alive"]).waiting(CID)
    checkpoint(tmp_path, "alive", CID)  # a live replica that does not hold it answers for itself
    assert not recovery(tmp_path, ["alive"]).waiting(CID)


def test_a_callers_id_is_never_read_as_a_path(tmp_path: Path) -> None:
    checkpoint(tmp_path, "gone", CID)
    (tmp_path / f"secret{SUFFIX}").write_bytes(b"x")
    rec = recovery(tmp_path, ["alive"])
    assert not rec.waiting("../../secret") and not rec.waiting("../secret")
    assert rec.waiting(CID)

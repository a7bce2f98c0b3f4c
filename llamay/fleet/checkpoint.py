"""Context checkpoints under the fleet's state directory.

Layout: `<state>/checkpoints/<replica id>/<context id>.llamayctx` (the snapshot format of
`llamay ctx snapshot`, signed with the fleet's key; folders 0700, files 0600) plus `alive`, a heartbeat file the replica touches on every pass. A
folder whose heartbeat is older than `stale_after` and whose replica is not live belongs to a
replica that died: its contexts are restored elsewhere, then the folder is removed."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from ..kv.storelock import write_atomic
from .trust import private_dir, write_private

__all__ = ["Checkpoints", "orphans"]

SUFFIX = ".llamayctx"


class Checkpoints:
    """One replica's checkpoint folder. Writes are atomic (temp file + rename), so a crash
    mid-write leaves the previous checkpoint of that context."""

    def __init__(self, root: Path, replica: str) -> None:
        self.root = root
        self.folder = root / replica
        self.heartbeat()  # before any sweep could take a new, empty folder for a dead one's

    def _ready(self) -> None:
        if not self.folder.is_dir():
            private_dir(self.root)
            private_dir(self.folder)

    def heartbeat(self) -> None:
        self._ready()
        write_private(self.folder / "alive", str(time.time()).encode())

    def write(self, cid: str, data: bytes, *, durable: bool = False) -> None:
        """Write a context's snapshot (signed by the caller: see `trust`), mode 0600;
        `durable` waits for the disk (file and folder) before it returns."""
        self._ready()
        write_atomic(self.folder / f"{cid}{SUFFIX}", data, durable=durable)

    def remove(self, cid: str) -> None:
        (self.folder / f"{cid}{SUFFIX}").unlink(missing_ok=True)

    def drop(self) -> None:
        """Forget every checkpoint of this replica (its contexts were moved)."""
        shutil.rmtree(self.folder, ignore_errors=True)


def last_beat(folder: Path) -> float:
    try:
        return (folder / "alive").stat().st_mtime
    except OSError:
        return 0.0


def orphans(root: Path, live: set[str], stale_after: float, now: float | None = None) -> list[Path]:
    """Checkpoint folders of replicas that are not live and have been silent `stale_after`."""
    if not root.is_dir():
        return []
    now = time.time() if now is None else now
    return [
        d for d in sorted(root.iterdir())
        if d.is_dir() and d.name not in live and now - last_beat(d) > stale_after
    ]  # fmt: skip


def saved(folder: Path) -> list[tuple[str, Path]]:
    """(context id, file) of each checkpoint in a replica's folder."""
    return [(f.name[: -len(SUFFIX)], f) for f in sorted(folder.glob(f"*{SUFFIX}"))]

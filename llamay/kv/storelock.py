"""One owner at a time for a context store (a folder of spill files and an index).

Two servers on one `LLAMAY_HOME` used to load each other's contexts, and whichever stopped
last rewrote the index with only its own view and deleted the files it did not know. The
store's owner now holds the lock on `<folder>/.lock` (`llamay.filelock`) for as long as it
uses the folder; a second process is refused with a message naming the owner's pid and command
line. The lock goes with the process (a crash or kill -9 releases it), so a stale lock file
never blocks a restart.

Writes go through `write_atomic` (temp file in the same folder, fsync, rename, fsync of the
folder): a kill at any moment leaves either the old file or the new one, never a torn one.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from pathlib import Path

from ..errors import Conflict
from ..filelock import FileLock

__all__ = ["StoreBusy", "StoreLock", "write_atomic"]

LOCK_NAME = ".lock"


class StoreBusy(Conflict):
    """Another owner holds the context store: another process, or (`here`) another model
    of this process loaded from the same weights."""

    code = "store_busy"

    def __init__(self, message: str, *, here: bool = False) -> None:
        super().__init__(message)
        self.here = here


_HELD_HERE: set[Path] = set()  # folders this process holds (flock does not refuse its own)
_HELD_LOCK = threading.Lock()


class StoreLock:
    """An exclusive lock on `folder` held until `release` (or the process ends)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        key = folder.resolve()
        with _HELD_LOCK:
            if key in _HELD_HERE:
                raise StoreBusy(f"the context store {folder} is in use by this process", here=True)
            _HELD_HERE.add(key)
        try:
            self._lock: FileLock | None = self._take(folder)
        except BaseException:
            with _HELD_LOCK:
                _HELD_HERE.discard(key)
            raise
        self._key = key

    @staticmethod
    def _take(folder: Path) -> FileLock:
        lock = FileLock(folder / LOCK_NAME, mode=0o600)
        if not lock.acquire(wait=False):
            owner = lock.read_note() or "pid unknown"
            raise StoreBusy(
                f"the context store {folder} is in use by another llamay process ({owner}); "
                "stop it, or give this one its own LLAMAY_HOME"
            )
        lock.write_note(f"pid {os.getpid()}: {' '.join(sys.argv)[:300]}\n")
        return lock

    @property
    def held(self) -> bool:
        return self._lock is not None

    def release(self) -> None:
        """Give the store up (idempotent); the lock file stays (see `llamay.filelock`)."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None
            with _HELD_LOCK:
                _HELD_HERE.discard(self._key)


def write_atomic(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace `path` with `data` so that a crash leaves the old or the new content. The
    file is private (mode 0600, as `mkstemp` makes it): it holds a tenant's KV or text.
    `durable` also waits for the disk (file and folder); without it the file need only
    survive the process."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if not durable:
        return
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)

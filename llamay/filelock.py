"""An exclusive lock on a file, across threads and processes: the one lock the model store's
fetches, model imports and context stores take.

It is an `flock` on the open file. flock() locks belong to the open file description, so two
threads that each take the lock exclude each other just as two processes do (and one thread
taking the same lock twice deadlocks: callers never nest one). The lock goes with the process
(a crash or kill -9 releases it), so a stale lock file never blocks anyone; the file stays on
release, since removing it would let a third process lock a new file while a second still
waits on the old one.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

__all__ = ["FileLock", "is_locked"]


class FileLock:
    """The lock on the file at `path` (created with `mode`, less the umask, if missing; its
    folder must exist). Held between `acquire` and `release`, or inside a `with`."""

    def __init__(self, path: Path, *, mode: int = 0o666) -> None:
        self.path = path
        self.mode = mode
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, *, wait: bool = True, on_wait: Callable[[], None] | None = None) -> bool:
        """Take the lock; True once it is held. If another holder has it: with `wait`, call
        `on_wait` once (so a caller can say why it waits), then block until it is free;
        without, return False at once."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, self.mode)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not wait:
                    os.close(fd)
                    return False
                if on_wait is not None:
                    on_wait()
                fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return True

    def release(self) -> None:
        """Give the lock up (idempotent)."""
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def write_note(self, text: str) -> None:
        """Replace the lock file's content with `text` (who holds it), for `read_note`."""
        if self._fd is None:
            raise RuntimeError(f"{self.path} is not held")
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, text.encode(), 0)

    def read_note(self) -> str:
        """What the holder wrote with `write_note` ("" if nothing, or unreadable)."""
        try:
            with open(self.path, "rb") as f:
                return f.read(400).decode(errors="replace").strip()
        except OSError:
            return ""

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def is_locked(path: Path) -> bool:
    """Whether someone holds the lock on `path` right now (False if there is no such file)."""
    if not path.exists():
        return False
    probe = FileLock(path)
    if not probe.acquire(wait=False):
        return True
    probe.release()
    return False

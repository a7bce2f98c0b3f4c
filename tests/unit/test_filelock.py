"""The one file lock: exclusive across holders (two in one process exclude each other as two
processes do), a note naming the holder, and a probe that does not take it."""

from __future__ import annotations

import threading
from pathlib import Path

from llamay.filelock import FileLock, is_locked


def test_a_held_lock_refuses_another_holder_until_released(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    assert not is_locked(path) and not path.exists()  # probing creates nothing
    first, second = FileLock(path), FileLock(path)
    assert first.acquire(wait=False) and first.held
    assert is_locked(path)
    assert not second.acquire(wait=False) and not second.held
    first.release()
    first.release()  # idempotent
    assert not is_locked(path) and path.exists()  # the file stays
    with second:
        assert second.held and not first.acquire(wait=False)
    assert not second.held


def test_a_waiter_is_told_once_and_gets_the_lock_on_release(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    holder = FileLock(path)
    holder.acquire()
    waited = threading.Event()
    got: list[bool] = []
    waiter = FileLock(path)
    thread = threading.Thread(target=lambda: got.append(waiter.acquire(on_wait=waited.set)))
    thread.start()
    assert waited.wait(30)
    assert got == []
    holder.release()
    thread.join(30)
    assert got == [True] and waiter.held
    waiter.release()


def test_the_holder_leaves_a_note(tmp_path: Path) -> None:
    lock = FileLock(tmp_path / "x.lock", mode=0o600)
    lock.acquire()
    lock.write_note("pid 1: a long command line")
    lock.write_note("pid 2")  # replaces, never appends
    assert FileLock(tmp_path / "x.lock").read_note() == "pid 2"
    assert (tmp_path / "x.lock").stat().st_mode & 0o777 == 0o600
    lock.release()

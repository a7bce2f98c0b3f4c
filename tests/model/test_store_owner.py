"""One owner per context store: two servers on one LLAMAY_HOME, stopped in either order, lose
nothing, and a kill -9 while contexts are being written leaves a store a fresh server reads."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx

from tests.serverproc import ServerProc, start_server

SYSTEM = [{"role": "system", "content": "Answer as the archive clerk would. " * 6}]


def make(s: ServerProc, text: str) -> str:
    r = httpx.post(
        s.base + "/v1/contexts", json={"messages": SYSTEM + [{"role": "user", "content": text}]}, timeout=60
    )
    assert r.status_code == 200, r.text
    return str(r.json()["id"])


def listed(s: ServerProc) -> set[str]:
    r = httpx.get(s.base + "/v1/contexts", timeout=60)
    assert r.status_code == 200, r.text
    return {c["id"] for c in r.json()["data"]}


def usable(s: ServerProc, cid: str) -> bool:
    return httpx.get(s.base + f"/v1/contexts/{cid}/snapshot", timeout=60).status_code == 200


def refused(model: Path, home: Path) -> str:
    """The log of a server that must refuse to start on `home`."""
    try:
        with start_server(model, home=home, timeout=60):
            pass
    except RuntimeError as exc:
        return str(exc)
    raise AssertionError("a second server started on a home another one owns")


def test_a_second_server_on_the_same_home_is_refused_and_nothing_is_lost(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    with start_server(tiny_model_path, home=home) as first:
        a = make(first, "first server's context")
        assert f"in use by another llamay process (pid {first.proc.pid}" in refused(tiny_model_path, home)
        assert listed(first) == {a} and usable(first, a)  # the refused one touched nothing
    with start_server(tiny_model_path, home=home) as second:  # the other order: it owns the store now
        assert listed(second) == {a}
        b = make(second, "second server's context")
        assert f"(pid {second.proc.pid}" in refused(tiny_model_path, home)
    with start_server(tiny_model_path, home=home) as third:
        assert listed(third) == {a, b}
        assert usable(third, a) and usable(third, b)


def test_kill_9_while_saving_leaves_a_readable_store(tiny_model_path: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    args = ("-concurrency", "2", "-ctx", "8192")
    with start_server(tiny_model_path, *args, home=home) as s:
        saved = {make(s, f"saved {i}") for i in range(6)}
    with start_server(tiny_model_path, *args, home=home) as s:
        assert listed(s) == saved
        fresh = {make(s, f"fresh {i}") for i in range(24)}  # more than stay resident: some spill
        store = next((home / "contexts").iterdir())
        s.proc.send_signal(signal.SIGTERM)  # shutdown writes every context, then the index
        while s.proc.poll() is None and not any(p.name.endswith(".tmp") for p in store.iterdir()):
            time.sleep(0.001)
        if s.proc.poll() is None:
            os.kill(s.proc.pid, signal.SIGKILL)  # mid-write
        s.proc.wait()
    with start_server(tiny_model_path, *args, home=home) as s:
        now = listed(s)
        assert saved <= now  # the previous index is whole
        assert now <= saved | fresh
        assert all(usable(s, cid) for cid in now)


def test_one_weights_file_loads_under_two_names_in_one_process(tiny_model_path: Path, tmp_path: Path) -> None:
    from llamay.runtime import RuntimeConfig, load_model

    config = RuntimeConfig(home=tmp_path, ctx=256)
    first = load_model("first", tiny_model_path, config)
    try:
        second = load_model("second", tiny_model_path, config)  # same weights, same home
        try:
            stores = sorted(p.name for p in (tmp_path / "contexts").iterdir())
            assert len(stores) == 2 and stores[1].startswith(stores[0]) and stores[1].endswith("second")
        finally:
            second.close()
    finally:
        first.close()
    again = load_model("third", tiny_model_path, config)  # the first store is free again
    again.close()
    assert len(list((tmp_path / "contexts").iterdir())) == 2

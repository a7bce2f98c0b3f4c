"""Loading a model with progress: /api/load's NDJSON stream, and a load stopped midway."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

import llamay.runtime.resident as runtime_mod
from llamay.api.ollama.routes import ollama_routes
from llamay.api.state import server_state
from llamay.errors import Conflict
from llamay.runtime import LoadRefused, Runtime, RuntimeConfig
from llamay.testing import write_tiny_llama


class SlowRuntime:
    """Loads take `steps` ticks of 0.1 s, reading a tenth of 1000 bytes a tick; then they
    succeed or raise `fail`."""

    def __init__(self, steps: int, fail: Exception | None = None) -> None:
        self.steps, self.fail, self.started = steps, fail, 0.0

    def loaded(self) -> list[Any]:
        return []

    def load_progress(self, name: str) -> tuple[int, int] | None:
        if not self.started:
            return None
        done = min(1000, int((time.monotonic() - self.started) / 0.1) * 100)
        return done, 1000

    async def use(self, name: str, keep_alive: float | None = None) -> Any:
        if self.steps == 0 and self.fail is not None:
            raise self.fail
        self.started = time.monotonic()
        await asyncio.sleep(0.1 * self.steps)
        if self.fail is not None:
            raise self.fail
        return SimpleNamespace(name=name, engine=SimpleNamespace(n_ctx=2048))


def post_load(runtime: Any, **body: Any) -> Any:
    app = Starlette(routes=ollama_routes())
    app.state = server_state(runtime)
    return TestClient(app).post("/api/load", json={"model": "big", **body})


def lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def test_a_load_streams_its_progress_then_success() -> None:
    r = post_load(SlowRuntime(steps=6))
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
    got = lines(r.text)
    loading = [e for e in got if e["status"] == "loading"]
    assert len(loading) >= 2 and all(e["total"] == 1000 for e in loading)
    done = [e["completed"] for e in loading]
    assert done == sorted(done) and done[-1] > done[0]
    assert got[-1]["status"] == "success" and got[-1]["context_length"] == 2048 and got[-1]["done"]


def test_a_load_that_fails_midway_ends_with_an_error_line() -> None:
    got = lines(post_load(SlowRuntime(steps=4, fail=LoadRefused("not enough memory for 'big'"))).text)
    assert got[0]["status"] == "loading"
    assert got[-1] == {"status": "error", "error": "not enough memory for 'big'", "code": "load_refused"}


def test_a_load_refused_at_once_is_an_http_error_and_stream_false_is_one_object() -> None:
    r = post_load(SlowRuntime(steps=0, fail=LoadRefused("not enough memory for 'big'")))
    assert r.status_code == 409 and "not enough memory" in r.text
    r = post_load(SlowRuntime(steps=2), stream=False)
    assert r.headers["content-type"] == "application/json" and r.json()["status"] == "success"


def test_unloading_a_model_that_is_loading_stops_its_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_tiny_llama(tmp_path / "m.gguf")
    seen: list[tuple[int, int] | None] = []

    def slow_load(name: str, p: Path, config: Any, sha: Any, progress: Any) -> Any:
        for i in range(200):  # as llama.cpp does: report, and stop when told to
            if progress(i / 200) is False:
                raise ValueError("llama.cpp could not load it")
            time.sleep(0.01)
        raise AssertionError("the load was not stopped")

    monkeypatch.setattr(runtime_mod, "load_model", slow_load)

    async def scenario() -> None:
        rt = Runtime(RuntimeConfig(home=tmp_path), resolve=lambda n: (n, path, None), keep_alive=-1)
        loading = asyncio.ensure_future(rt.use("m"))
        while rt.load_progress("m") is None or rt.load_progress("m") == (0, path.stat().st_size):
            await asyncio.sleep(0.01)
        seen.append(rt.load_progress("m"))
        assert await rt.unload("m") is True
        with pytest.raises(Conflict, match="cancelled"):
            await loading
        assert rt.load_progress("m") is None and rt.loaded() == []

    asyncio.run(scenario())
    got = seen[0]
    assert got is not None and 0 < got[0] < got[1] == path.stat().st_size

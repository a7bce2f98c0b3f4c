"""Several models in one server: load on demand, residency limits, idle unloading, and
refusing a load that would not fit in memory."""

from __future__ import annotations

import concurrent.futures as cf
import time
from pathlib import Path

import httpx
import pytest

from llamay.testing import write_tiny_llama
from tests.serverproc import start_server


def ask(base: str, model: str, n: int = 8) -> httpx.Response:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": n,
        "temperature": 0,
    }
    return httpx.post(base + "/v1/chat/completions", json=body, timeout=120)


def loaded(base: str) -> list[str]:
    return [m["name"] for m in httpx.get(base + "/health").json()["models"]]


@pytest.fixture()
def two_models(tmp_path: Path) -> tuple[Path, Path]:
    return write_tiny_llama(tmp_path / "alpha.gguf", seed=1), write_tiny_llama(tmp_path / "beta.gguf", seed=2)


def test_models_load_on_demand_and_lru_makes_room(
    two_models: tuple[Path, Path], tiny_model_path: Path, tmp_path: Path
) -> None:
    alpha, beta = two_models
    with start_server(tiny_model_path, "-max-loaded", "2", home=tmp_path / "h") as s:
        assert loaded(s.base) == ["tiny-llama"]
        r = ask(s.base, str(alpha))
        assert r.status_code == 200 and r.json()["model"] == "alpha"
        assert sorted(loaded(s.base)) == ["alpha", "tiny-llama"]
        assert ask(s.base, "alpha").status_code == 200  # by name once loaded
        r = ask(s.base, str(beta))
        assert r.status_code == 200
        now = loaded(s.base)
        assert len(now) == 2 and "beta" in now and "alpha" not in now  # least recently used went
        assert ask(s.base, "").json()["model"] == "tiny-llama"


def test_loading_one_model_does_not_stall_another(
    two_models: tuple[Path, Path], tiny_model_path: Path, tmp_path: Path
) -> None:
    alpha, _ = two_models
    with start_server(tiny_model_path, home=tmp_path / "h") as s:
        with cf.ThreadPoolExecutor(2) as pool:
            load = pool.submit(ask, s.base, str(alpha), 4)
            t0 = time.monotonic()
            quick = ask(s.base, "", 4)
            waited = time.monotonic() - t0
            assert quick.status_code == 200 and load.result().status_code == 200
        assert waited < 30  # answered while the other model loaded (a loose bound: no timing claims)


def test_idle_models_unload_after_keepalive(
    two_models: tuple[Path, Path], tiny_model_path: Path, tmp_path: Path
) -> None:
    alpha, _ = two_models
    with start_server(tiny_model_path, "-keepalive", "1s", home=tmp_path / "h") as s:
        assert ask(s.base, str(alpha)).status_code == 200
        assert "alpha" in loaded(s.base)
        deadline = time.monotonic() + 15
        while "alpha" in loaded(s.base) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert loaded(s.base) == ["tiny-llama"]  # the served model stays
        assert ask(s.base, str(alpha)).status_code == 200  # and it comes back on demand
        assert "alpha" in loaded(s.base)


def test_load_that_does_not_fit_is_refused(
    two_models: tuple[Path, Path], tiny_model_path: Path, tmp_path: Path
) -> None:
    alpha, _ = two_models
    with start_server(tiny_model_path, home=tmp_path / "h", env={"LLAMAY_MEM_AVAILABLE": "1000"}) as s:
        r = ask(s.base, str(alpha))
        assert r.status_code == 409
        assert r.json()["error"]["code"] == "load_refused" and "memory" in r.json()["error"]["message"]
        assert ask(s.base, "").status_code == 200  # the loaded model still serves


def test_unknown_model_is_404(tiny_model_path: Path, tmp_path: Path) -> None:
    with start_server(tiny_model_path, home=tmp_path / "h") as s:
        r = ask(s.base, "no-such-model:7b")
        assert r.status_code == 404 and "no-such-model" in r.json()["error"]["message"]

"""The server names the models whose output may vary with what else it runs: /api/show's
`batch_invariant` and `batch_variance`, and the `X-Llamay-Batch-Invariant` header of every
response that used a model (backend.invariance decides; a real app on tiny models)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from llamay.config import RuntimeConfig, ServerConfig
from llamay.server import build_server
from llamay.testing import quantize_gguf, write_tiny_llama

HEADER = "x-llamay-batch-invariant"
SHAPE = {"n_embd": 256, "n_ff": 512, "n_layer": 1}


@pytest.fixture(scope="module")
def f32_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("variance") / "tiny-f32.gguf", **SHAPE)


@pytest.fixture(scope="module")
def q3_path(f32_path: Path) -> Path:
    return quantize_gguf(f32_path, f32_path.with_name("tiny-q3_k_m.gguf"), "Q3_K_M")


def client_for(model: Path, home: Path, kv_type: str = "f16") -> TestClient:
    config = ServerConfig(
        model=str(model), runtime=RuntimeConfig(ctx=512, threads=2, concurrency=2, home=home, kv_type=kv_type)
    )
    return TestClient(build_server(config))


def loaded_name(client: TestClient) -> str:
    return str(client.get("/api/ps").json()["models"][0]["name"])


@pytest.fixture()
def inside(f32_path: Path, tmp_path: Path) -> Iterator[TestClient]:
    with client_for(f32_path, tmp_path) as client:
        yield client


def test_a_model_inside_the_promise_says_so(inside: TestClient) -> None:
    show = inside.post("/api/show", json={"model": loaded_name(inside)}).json()
    assert show["batch_invariant"] is True and show["batch_variance"] == []
    done = inside.post("/v1/completions", json={"prompt": "hello", "max_tokens": 2})
    assert done.status_code == 200 and done.headers[HEADER] == "yes"
    body = {"model": "", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": True}
    with inside.stream("POST", "/v1/chat/completions", json=body) as streamed:
        assert streamed.headers[HEADER] == "yes"
        assert "[DONE]" in "".join(streamed.iter_text())
    assert HEADER not in inside.get("/api/tags").headers  # no model used, nothing said


def test_a_model_with_unchecked_weights_is_named(q3_path: Path, tmp_path: Path) -> None:
    with client_for(q3_path, tmp_path) as client:
        show = client.post("/api/show", json={"model": loaded_name(client)}).json()
        assert show["batch_invariant"] is False
        assert any(r.startswith("Q3_K") and "weights (not checked)" in r for r in show["batch_variance"])
        done = client.post("/api/generate", json={"model": "", "prompt": "hello", "stream": False,
                                                  "options": {"num_predict": 2}})  # fmt: skip
        assert done.status_code == 200
        assert done.headers[HEADER].startswith("no; ") and "Q3_K" in done.headers[HEADER]


def test_a_q8_0_kv_cache_takes_any_model_outside(f32_path: Path, tmp_path: Path) -> None:
    with client_for(f32_path, tmp_path, kv_type="q8_0") as client:
        done = client.post("/v1/completions", json={"prompt": "hello", "max_tokens": 2})
        assert done.headers[HEADER] == "no; a q8_0 KV cache"

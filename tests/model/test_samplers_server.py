"""The further samplers and the sampling defaults through a real server on the tiny model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.serverproc import ServerProc, start_server

OPTIONS: list[dict[str, Any]] = [
    {"mirostat": 1, "mirostat_tau": 3.0, "mirostat_eta": 0.2},
    {"mirostat": 2},
    {"tfs_z": 0.8},
    {"xtc_probability": 1.0, "xtc_threshold": 0.05},
    {"dry_multiplier": 0.8, "dry_base": 1.75, "dry_allowed_length": 1, "dry_penalty_last_n": 32,
     "dry_sequence_breakers": ["\n", "o"]},
    {"dry_multiplier": 2.0, "dry_allowed_length": 1},  # llama-server's default breakers
]  # fmt: skip


@pytest.fixture(scope="module")
def server(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    home = tmp_path_factory.mktemp("home")
    with start_server(tiny_model_path, "-ctx", "1024", "-temp", "0.3", "--top-k", "7", home=home) as s:
        yield s


@pytest.mark.parametrize("extra", OPTIONS)
def test_each_sampler_on_every_api(server: ServerProc, extra: dict[str, Any]) -> None:
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "seed": 3, **extra}
    r = httpx.post(f"{server.url}/chat/completions", json=chat, timeout=60)
    assert r.status_code == 200, r.text
    assert isinstance(r.json()["choices"][0]["message"]["content"], str)
    again = httpx.post(f"{server.url}/chat/completions", json=chat, timeout=60).json()
    assert again["choices"][0]["message"] == r.json()["choices"][0]["message"]  # seeded: the same
    comp = {"prompt": "once upon", "max_tokens": 8, "seed": 3, **extra}
    r = httpx.post(f"{server.url}/completions", json=comp, timeout=60)
    assert r.status_code == 200, r.text
    body = {"model": "", "prompt": "once", "stream": False, "options": {"num_predict": 8, "seed": 3, **extra}}
    r = httpx.post(f"{server.base}/api/generate", json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert isinstance(r.json()["response"], str)


def test_out_of_range_and_unsupported_are_400(server: ServerProc) -> None:
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    r = httpx.post(f"{server.url}/chat/completions", json={**chat, "mirostat": 3}, timeout=60)
    assert r.status_code == 400 and "mirostat" in r.text
    r = httpx.post(f"{server.url}/chat/completions", json={**chat, "dry_sequence_breakers": [""]}, timeout=60)
    assert r.status_code == 400 and "dry_sequence_breakers" in r.text
    body = {"model": "", "prompt": "x", "stream": False, "options": {"tfs_z": 2}}
    r = httpx.post(f"{server.base}/api/generate", json=body, timeout=60)
    assert r.status_code == 400 and "tfs_z" in r.text


def test_defaults_show_in_models_and_show(server: ServerProc) -> None:
    models = httpx.get(f"{server.url}/models", timeout=30).json()["data"]
    assert models[0]["llamay_sampling"] == {"temperature": 0.3, "top_k": 7}
    one = httpx.get(f"{server.url}/models/{models[0]['id']}", timeout=30).json()
    assert one["llamay_sampling"] == {"temperature": 0.3, "top_k": 7}
    shown = httpx.post(f"{server.base}/api/show", json={"model": models[0]["id"]}, timeout=30).json()
    lines = {line.split()[0]: line.split()[1] for line in shown["parameters"].splitlines()}
    assert lines["temperature"] == "0.3" and lines["top_k"] == "7"


def test_server_defaults_apply_on_every_route(server: ServerProc) -> None:
    """Started with -temp 0.3 --top-k 7: a request that sets neither samples as one that
    sets both to those values."""
    msgs = [{"role": "user", "content": "tell me"}]
    routes: list[tuple[str, dict[str, Any], Any]] = [
        ("/v1/chat/completions", {"messages": msgs, "max_tokens": 12, "seed": 5},
         lambda j: j["choices"][0]["message"]["content"]),
        ("/v1/completions", {"prompt": "once upon", "max_tokens": 12, "seed": 5}, lambda j: j["choices"][0]["text"]),
        ("/v1/messages", {"model": "", "messages": msgs, "max_tokens": 12, "seed": 5}, lambda j: j["content"]),
    ]  # fmt: skip
    for path, body, text in routes:
        got = [
            text(httpx.post(f"{server.base}{path}", json={**body, **extra}, timeout=60).json())
            for extra in ({}, {"temperature": 0.3, "top_k": 7}, {"temperature": 1.0, "top_k": 0})
        ]
        assert got[0] == got[1], path

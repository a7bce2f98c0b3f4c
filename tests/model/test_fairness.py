"""Fair share between tenants on a real server with two user keys: one user's flood of
prompts (a completions request with 64 of them is 64 sequences) neither refuses nor starves
the other user's chats, and the flooder's own excess is a 429 naming the limit. Assertions
are about outcomes and order, never about elapsed time."""

from __future__ import annotations

import concurrent.futures as cf
import json
import select
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.serverproc import ServerProc, start_server

ANN = {"Authorization": "Bearer ann-key"}  # floods
BOB = {"Authorization": "Bearer bob-key"}  # chats
ROOT = {"Authorization": "Bearer root-key"}  # reads /v1/stats
N_PROMPTS = 64  # the server's default queue limit per principal
NO_END = {str(t): -100 for t in range(3)}  # generate to max_tokens


@pytest.fixture(scope="module")
def server(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    home = tmp_path_factory.mktemp("fairness")
    keys = home / "keys.json"
    keys.write_text(json.dumps({"keys": [
        {"key": "ann-key", "principal": "ann"},
        {"key": "bob-key", "principal": "bob"},
        {"key": "root-key", "principal": "root", "role": "admin"},
    ]}))  # fmt: skip
    args = ["-concurrency", "2", "-ctx", "8192", "-keys", str(keys)]
    with start_server(tiny_model_path, *args, home=home / "h") as s:
        yield s


def flood_body(tag: str) -> dict[str, Any]:
    prompts = [f"Document {tag}-{i}: the tide came in at {i} past the hour and" for i in range(N_PROMPTS)]
    return {"prompt": prompts, "max_tokens": 96, "temperature": 0, "logit_bias": NO_END}


def waiting(server: ServerProc) -> int:
    """Sequences waiting for the model (admin stats)."""
    stats = httpx.get(server.base + "/v1/stats", headers=ROOT, timeout=60).json()
    return int(stats["queue_depth"])


def test_a_flood_of_prompts_neither_refuses_nor_starves_another_user(server: ServerProc) -> None:
    with cf.ThreadPoolExecutor(1) as pool:
        first = pool.submit(
            httpx.post, server.url + "/completions", headers=ANN, json=flood_body("a"), timeout=600
        )
        while not waiting(server):  # until ann's 64 sequences are queued (no time asserted)
            assert not first.done(), first.result().text
            select.select([], [], [], 0.05)
        # another 64 is ann's own excess: a 429 naming the limit, with Retry-After
        more = httpx.post(server.url + "/completions", headers=ANN, json=flood_body("b"), timeout=60)
        assert more.status_code == 429, more.text
        assert more.headers["retry-after"].isdigit()
        assert "at most 64 sequences waiting" in more.json()["error"]["message"]
        # refused before its prompts are prepared: a bias on a token the model lacks (a 400
        # once the prompt is prepared) is not even looked at while the queue is full
        bad = {"prompt": ["x"] * N_PROMPTS, "max_tokens": 4, "logit_bias": {"99999999": 1}}
        early = httpx.post(server.url + "/completions", headers=ANN, json=bad, timeout=60)
        assert early.status_code == 429, early.text
        # bob's chats, OpenAI's and Ollama's, are all answered while ann's backlog still
        # waits: admitted ahead of it, not after it
        for round_ in range(3):
            chat = httpx.post(server.url + "/chat/completions", headers=BOB, timeout=300, json={
                "messages": [{"role": "user", "content": f"Say hi {round_}"}], "max_tokens": 8,
            })  # fmt: skip
            assert chat.status_code == 200, chat.text
            assert waiting(server) > 0, "bob's chat was served after ann's backlog"
            ollama = httpx.post(server.base + "/api/chat", headers=BOB, timeout=300, json={
                "model": "tiny-llama", "stream": False, "options": {"num_predict": 8},
                "messages": [{"role": "user", "content": f"Say hello {round_}"}],
            })  # fmt: skip
            assert ollama.status_code == 200, ollama.text
            assert waiting(server) > 0, "bob's chat was served after ann's backlog"
        done = first.result()
    # ann loses nothing by it: every one of her prompts ran to its length
    assert done.status_code == 200, done.text
    choices = done.json()["choices"]
    assert len(choices) == N_PROMPTS and {c["finish_reason"] for c in choices} == {"length"}
    # what the engine computed for each, in the admin's figures
    model = httpx.get(server.base + "/v1/stats", headers=ROOT, timeout=60).json()["models"][0]
    by = model["computed_by_principal"]
    assert by["ann"] > by["bob"] > 0 and sum(by.values()) == model["computed_tokens"]
    assert server.alive()

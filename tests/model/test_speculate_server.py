"""Speculative decoding over HTTP, on real server processes: a server with `-speculate on` and
one with `-speculate off` answer the same requests with the same tokens and log-probabilities,
through sessions, forks and a snapshot restored from one into the other; the counters of
drafted and taken tokens reach /v1/stats and /metrics.

As in test_speculate.py, logit bias narrows the random-weight model to a few tokens so that
its output repeats and prompt lookup has something to guess.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.serverproc import ServerProc, start_server

NARROW = {str(t): 30 for t in (40, 41, 42, 43)}
SYSTEM = [{"role": "system", "content": "Answer in the shortest way you can, please. " * 4}]
ASK = {"role": "user", "content": "Say something"}


@pytest.fixture(scope="module")
def servers(
    tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, ServerProc]]:
    with (
        start_server(tiny_model_path, "-speculate", "on", home=tmp_path_factory.mktemp("on")) as on,
        start_server(tiny_model_path, "-speculate", "off", home=tmp_path_factory.mktemp("off")) as off,
    ):
        yield {"on": on, "off": off}


def post(s: ServerProc, path: str, **kw: Any) -> httpx.Response:
    return httpx.post(s.base + path, timeout=60, **kw)


def chat(s: ServerProc, messages: list[dict], session: str | None = None, **extra: Any) -> dict:
    body: dict = {
        "messages": messages,
        "temperature": 0.7,
        "seed": 5,
        "max_tokens": 48,
        "logit_bias": NARROW,
        "logprobs": True,
        "top_logprobs": 2,
        **extra,
    }
    if session:
        body["llamay_session"] = session
    r = post(s, "/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def answer(reply: dict) -> tuple[str, Any]:
    choice = reply["choices"][0]
    return choice["message"]["content"], choice["logprobs"]


def drafts(s: ServerProc) -> tuple[int, int]:
    m = httpx.get(s.base + "/v1/stats").json()["models"][0]
    return m["draft_tokens"], m["draft_accepted_tokens"]


def test_plain_and_schema_answers_are_the_same(servers: dict[str, ServerProc]) -> None:
    before = drafts(servers["on"])
    got = {k: answer(chat(s, SYSTEM + [ASK])) for k, s in servers.items()}
    assert got["on"] == got["off"]
    schema = {"type": "object", "properties": {"mood": {"enum": ["calm", "busy"]}}, "required": ["mood"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "m", "schema": schema}}
    got = {k: answer(chat(s, SYSTEM + [ASK], response_format=fmt)) for k, s in servers.items()}
    assert got["on"] == got["off"]
    after = drafts(servers["on"])
    assert after[0] > before[0] and after[1] > before[1]
    assert drafts(servers["off"]) == (0, 0)


def test_sessions_forks_and_a_restored_snapshot_continue_the_same(servers: dict[str, ServerProc]) -> None:
    turns: dict[str, list[tuple[str, Any]]] = {}
    for k, s in servers.items():
        r = post(s, "/v1/contexts", json={"messages": SYSTEM})
        assert r.status_code == 200, r.text
        forks = post(s, f"/v1/contexts/{r.json()['id']}/fork?n=2").json()["data"]
        first = chat(s, SYSTEM + [ASK], session=forks[0]["id"])
        reply = first["choices"][0]["message"]["content"]
        turn2 = SYSTEM + [ASK, {"role": "assistant", "content": reply}, {"role": "user", "content": "More"}]
        second = chat(s, turn2, session=forks[0]["id"])
        other = chat(s, SYSTEM + [ASK], session=forks[1]["id"], seed=6)
        turns[k] = [answer(first), answer(second), answer(other)]
    assert turns["on"] == turns["off"]

    # A context made and used without speculation, restored where speculation is on.
    off, on = servers["off"], servers["on"]
    cid = post(off, "/v1/contexts", json={"messages": SYSTEM}).json()["id"]
    here = answer(chat(off, SYSTEM + [ASK], session=cid))
    turn2 = SYSTEM + [ASK, {"role": "assistant", "content": here[0]}, {"role": "user", "content": "More"}]
    snap = httpx.get(off.base + f"/v1/contexts/{cid}/snapshot").content
    restored = post(on, "/v1/contexts/restore", content=snap)
    assert restored.status_code == 200, restored.text
    there = answer(chat(on, turn2, session=restored.json()["id"]))
    assert there == answer(chat(off, turn2, session=cid))


def test_metrics_count_drafts(servers: dict[str, ServerProc]) -> None:
    chat(servers["on"], SYSTEM + [ASK])
    text = httpx.get(servers["on"].base + "/metrics").text
    drafted = re.search(r'^llamay_draft_tokens_total\{model="[^"]+"\} (\d+)', text, re.M)
    taken = re.search(r'^llamay_draft_accepted_tokens_total\{model="[^"]+"\} (\d+)', text, re.M)
    assert drafted and taken
    assert int(drafted.group(1)) >= int(taken.group(1)) > 0


def test_a_draft_model_given_by_flag(
    tiny_model_path: Path, tmp_path: Path, servers: dict[str, ServerProc]
) -> None:
    """`-draft` loads a draft model beside the served one (here the model itself, whose greedy
    guesses are always right): its guesses are checked and the answer is the plain one."""
    body = {"messages": [ASK], "temperature": 0, "max_tokens": 32}
    with start_server(tiny_model_path, "-draft", str(tiny_model_path), home=tmp_path) as s:
        got = post(s, "/v1/chat/completions", json=body).json()["choices"][0]["message"]["content"]
        drafted, taken = drafts(s)
    want = post(servers["off"], "/v1/chat/completions", json=body).json()["choices"][0]["message"]["content"]
    assert got == want
    assert drafted == taken > 0

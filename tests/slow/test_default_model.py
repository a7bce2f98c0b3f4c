"""The real default model behind a real `llamay serve`, driven with the official openai client."""

from __future__ import annotations

import concurrent.futures as cf
import re
import subprocess
import sys
from collections.abc import Iterator

import openai
import pytest

from llamay.store import llamay_home
from tests.serverproc import ServerProc, start_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProc]:
    # The real home: the default model is fetched once and reused, as a user would have it.
    with start_server("", home=llamay_home(), timeout=600) as s:
        yield s


@pytest.fixture()
def client(server: ServerProc) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=120)


def test_says_hello(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(
        model="", messages=[{"role": "user", "content": "Say hello."}], max_tokens=200, temperature=0
    )
    text = r.choices[0].message.content or ""
    assert r.choices[0].finish_reason == "stop"
    assert "hello" in text.lower()
    assert r.model == "smollm2:135m"


def test_stream_matches_non_stream(client: openai.OpenAI) -> None:
    msgs = [{"role": "user", "content": "Name three colours."}]
    # The second request is a cache hit on the first one's prompt.
    whole = client.chat.completions.create(model="", messages=msgs, temperature=0, max_tokens=40)
    parts = [
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(
            model="", messages=msgs, temperature=0, max_tokens=40, stream=True
        )
        if c.choices
    ]
    assert "".join(parts) == whole.choices[0].message.content


def test_several_at_once(client: openai.OpenAI) -> None:
    questions = [f"What is {i} plus {i}? Answer with a number." for i in range(1, 7)]

    def ask(q: str) -> tuple[str, str]:
        r = client.chat.completions.create(
            model="", messages=[{"role": "user", "content": q}], temperature=0, max_tokens=30
        )
        return q, r.choices[0].message.content or ""

    alone = dict([ask(questions[0])])
    with cf.ThreadPoolExecutor(6) as pool:
        together = dict(pool.map(ask, questions))
    assert all(together.values())
    assert together[questions[0]] == alone[questions[0]]


def test_greedy_output_is_the_same_alone_and_among_seven_others(client: openai.OpenAI) -> None:
    """Eight greedy requests of different lengths, half sharing a system prompt (cache hits),
    give exactly their alone output when they run together: batching and where a request's
    KV cells land do not change its arithmetic. The server has served other tests before."""
    system = "You answer questions for the support desk of a small clinic. Be brief and exact. " * 4
    questions = [
        "How do I reset my password?",
        "What are your opening hours on Saturday?",
        "Write a short poem about the sea.",
        "List the planets of the solar system in order.",
        "Explain what a prime number is. " * 6,
        "Can I bring my dog to the appointment?",
        "Describe a lighthouse keeper's day in detail.",
        "Count from one to twenty in words.",
    ]

    def ask(i: int) -> str:
        msgs = [{"role": "user", "content": questions[i]}]
        if i % 2 == 0:
            msgs.insert(0, {"role": "system", "content": system})
        r = client.chat.completions.create(model="", messages=msgs, temperature=0, max_tokens=48 + 8 * i)
        return r.choices[0].message.content or ""

    alone = [ask(i) for i in range(len(questions))]
    with cf.ThreadPoolExecutor(len(questions)) as pool:
        together = list(pool.map(ask, range(len(questions))))
    assert all(alone)
    mismatched = [i for i, (a, b) in enumerate(zip(alone, together, strict=True)) if a != b]
    assert mismatched == []


def test_llamay_run_streams_and_prints_stats() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "llamay", "run", "-chat", "-n", "20", "-temp", "0", "-p", "Say hello."],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip()
    assert re.search(
        r"prompt \d+ tokens in \d+ms \([\d.]+ tok/s\) · generated \d+ in [\d.]+m?s \([\d.]+ tok/s\)"
        r"( · \d+ of \d+ drafted taken)? · stop: (stop|length)",
        out.stderr,
    ), out.stderr


def test_cache_hits_never_change_greedy_output() -> None:
    """The same greedy request cold, then warm (a cache hit), then as a second turn on top of
    its own reply: each equals what a fresh server computes for the same prompt."""
    import tempfile
    from pathlib import Path

    from llamay.store import ModelStore

    path = ModelStore().resolve(None).path

    turn1 = [{"role": "user", "content": "List three fruits, one per line."}]

    def ask(c: openai.OpenAI, msgs: list[dict]) -> tuple[str, int]:
        r = c.chat.completions.create(model="", messages=msgs, temperature=0, max_tokens=40)
        return r.choices[0].message.content or "", r.usage.prompt_tokens_details.cached_tokens

    with tempfile.TemporaryDirectory() as h1, start_server(path, home=Path(h1), timeout=600) as warm_server:
        client = openai.OpenAI(base_url=warm_server.url, api_key="x", max_retries=0, timeout=120)
        first, _ = ask(client, turn1)
        again, cached = ask(client, turn1)
        turn2 = turn1 + [
            {"role": "assistant", "content": first},
            {"role": "user", "content": "And three vegetables?"},
        ]
        warm2, cached2 = ask(client, turn2)
    assert cached > 0 and again == first
    assert cached2 > 0
    with tempfile.TemporaryDirectory() as home, start_server(path, home=Path(home), timeout=600) as fresh:
        cold = openai.OpenAI(base_url=fresh.url, api_key="x", max_retries=0, timeout=120)
        assert ask(cold, turn2)[0] == warm2

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
        r"prompt \d+ tokens in \d+ms \([\d.]+ tok/s\) · generated \d+ in [\d.]+m?s \([\d.]+ tok/s\) · stop: (stop|length)",
        out.stderr,
    ), out.stderr

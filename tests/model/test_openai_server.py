"""The OpenAI API of a real `llamay serve` process on a tiny generated model, driven with the
official `openai` client (and raw HTTP where a client would refuse to send bad input)."""

from __future__ import annotations

import concurrent.futures as cf
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.serverproc import ServerProc, start_server

PROMPT = [{"role": "user", "content": "Tell me about the weather in the mountains."}]


@pytest.fixture(scope="module")
def server(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    home = tmp_path_factory.mktemp("home")
    with start_server(tiny_model_path, "-concurrency", "8", "-ctx", "2048", home=home) as s:
        yield s


@pytest.fixture()
def client(server: ServerProc) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=60)


def greedy(client: openai.OpenAI, messages: list[dict], n: int = 30, **kw: object) -> str:
    r = client.chat.completions.create(model="", messages=messages, temperature=0, max_tokens=n, **kw)
    return r.choices[0].message.content or ""


def streamed(client: openai.OpenAI, **kw: object) -> tuple[str, list[str], str | None]:
    parts: list[str] = []
    finish = None
    for chunk in client.chat.completions.create(model="", stream=True, **kw):
        for c in chunk.choices:
            if c.delta.content:
                parts.append(c.delta.content)
            finish = c.finish_reason or finish
    return "".join(parts), parts, finish


def test_stream_and_non_stream_give_the_same_text(client: openai.OpenAI) -> None:
    whole = client.chat.completions.create(model="", messages=PROMPT, temperature=0, max_tokens=40)
    text, parts, finish = streamed(client, messages=PROMPT, temperature=0, max_tokens=40)
    assert len(text) > 20 and len(parts) > 5
    assert text == whole.choices[0].message.content
    assert finish == whole.choices[0].finish_reason == "length"
    assert whole.usage is not None and whole.usage.completion_tokens == 40


def test_same_seed_same_text(client: openai.OpenAI) -> None:
    kw = dict(messages=PROMPT, temperature=1.0, max_tokens=30)
    a = client.chat.completions.create(model="", seed=1234, **kw).choices[0].message.content
    b = client.chat.completions.create(model="", seed=1234, **kw).choices[0].message.content
    others = {
        client.chat.completions.create(model="", seed=s, **kw).choices[0].message.content for s in (1, 2, 3)
    }
    assert a == b
    assert len(others | {a}) > 1  # the seed really drives sampling


def test_greedy_alone_equals_greedy_among_seven_others(client: openai.OpenAI) -> None:
    others = [
        [{"role": "user", "content": f"Question {i}: what is {i} plus {i}? Say it {'again ' * i}"}]
        for i in range(7)
    ]
    alone = greedy(client, PROMPT, 40)
    others_alone = [greedy(client, m, 60) for m in others]
    with cf.ThreadPoolExecutor(8) as pool:
        futs = [pool.submit(greedy, client, m, 60) for m in others]
        time.sleep(0.05)  # let the others start generating first
        mine = pool.submit(greedy, client, PROMPT, 40)
        results = [f.result() for f in futs]
    assert mine.result() == alone
    assert results == others_alone


def test_seeded_sampling_is_independent_of_batch(client: openai.OpenAI) -> None:
    kw = dict(model="", messages=PROMPT, temperature=0.9, max_tokens=30, seed=77)
    alone = client.chat.completions.create(**kw).choices[0].message.content
    with cf.ThreadPoolExecutor(6) as pool:
        noise = [
            pool.submit(greedy, client, [{"role": "user", "content": f"noise {i}"}], 50) for i in range(5)
        ]
        mine = pool.submit(lambda: client.chat.completions.create(**kw).choices[0].message.content)
        [f.result() for f in noise]
    assert mine.result() == alone


def test_stop_string_split_across_tokens_is_cut_and_never_streamed(client: openai.OpenAI) -> None:
    full = greedy(client, PROMPT, 40)
    stop = full[12:17]  # a piece from the middle: with byte-level tokens it spans several tokens
    assert len(stop.strip()) >= 2
    cut = full[: full.index(stop)]
    r = client.chat.completions.create(model="", messages=PROMPT, temperature=0, max_tokens=40, stop=[stop])
    assert r.choices[0].message.content == cut and r.choices[0].finish_reason == "stop"
    text, parts, finish = streamed(client, messages=PROMPT, temperature=0, max_tokens=40, stop=[stop])
    assert text == cut and finish == "stop"
    assert all(stop not in p for p in parts)


def test_usage_counts_are_exact(client: openai.OpenAI, server: ServerProc) -> None:
    tokens = [5, 6, 7, 8, 9, 10, 11]
    r = client.completions.create(model="", prompt=tokens, max_tokens=9, temperature=0)
    assert r.usage is not None
    assert r.usage.prompt_tokens == 7 and r.usage.completion_tokens == 9 and r.usage.total_tokens == 16
    chunks = list(
        client.chat.completions.create(
            model="",
            messages=PROMPT,
            max_tokens=12,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
            logprobs=True,
        )
    )
    assert chunks[-1].usage is not None and chunks[-1].choices == []
    n_lp = sum(len(c.choices[0].logprobs.content) for c in chunks if c.choices and c.choices[0].logprobs)
    assert chunks[-1].usage.completion_tokens == n_lp == 12


def test_n_choices_and_logprobs(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(
        model="", messages=PROMPT, n=3, max_tokens=10, temperature=1.0, seed=5, logprobs=True, top_logprobs=2
    )
    assert [c.index for c in r.choices] == [0, 1, 2]
    for c in r.choices:
        lp = c.logprobs.content
        assert len(lp) == 10
        for entry in lp:
            assert entry.logprob <= 0 and len(entry.top_logprobs) == 2
            assert entry.top_logprobs[0].logprob >= entry.top_logprobs[1].logprob
    assert r.usage.completion_tokens == 30


def test_completions_echo_and_stream(client: openai.OpenAI) -> None:
    whole = client.completions.create(model="", prompt="The river", max_tokens=15, temperature=0)
    parts = [
        c.choices[0].text
        for c in client.completions.create(
            model="", prompt="The river", max_tokens=15, temperature=0, stream=True
        )
        if c.choices
    ]
    assert "".join(parts) == whole.choices[0].text
    echoed = client.completions.create(model="", prompt="The river", max_tokens=15, temperature=0, echo=True)
    assert echoed.choices[0].text == "The river" + whole.choices[0].text


def test_models_and_health(client: openai.OpenAI, server: ServerProc) -> None:
    ids = [m.id for m in client.models.list()]
    assert ids and ids[0].startswith("tiny")
    health = httpx.get(server.base + "/health").json()
    assert health["status"] == "ok"


@pytest.mark.parametrize(
    "body, status, needle",
    [
        (b"{not json", 400, "not valid JSON"),
        (b"", 400, "empty"),
        (b"[1,2]", 400, "JSON object"),
        (b'{"messages": "hi"}', 400, "messages"),
        (b'{"messages": [{"role": "user", "content": "x"}], "temperature": "warm"}', 400, "temperature"),
        (b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": -1}', 400, "max_tokens"),
        (b'{"model": "no-such-model", "messages": [{"role": "user", "content": "x"}]}', 404, "no-such-model"),
        (b'{"messages": [{"role": "user", "content": "x\\ud800"}]}', 400, "surrogate"),
        (
            b'{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}',
            400,
            "images",
        ),
    ],
)
def test_bad_input_gets_a_clear_4xx(server: ServerProc, body: bytes, status: int, needle: str) -> None:
    r = httpx.post(
        server.url + "/chat/completions", content=body, headers={"content-type": "application/json"}
    )
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert needle in err["message"] and err["type"]
    assert httpx.get(server.base + "/health").status_code == 200


def test_prompt_longer_than_context_is_a_400(client: openai.OpenAI, server: ServerProc) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="", prompt=list(range(5, 205)) * 11, max_tokens=5)
    assert "context" in str(e.value) and e.value.code == "context_length_exceeded"
    assert greedy(client, PROMPT, 5)  # still serving


def test_unknown_route_and_method(server: ServerProc) -> None:
    assert httpx.get(server.base + "/v1/nothing").status_code == 404
    r = httpx.get(server.url + "/chat/completions")
    assert r.status_code == 405 and "not allowed" in r.json()["error"]["message"]


def test_disconnect_mid_stream_frees_kv(server: ServerProc) -> None:
    def health() -> dict:
        return httpx.get(server.base + "/health").json()["models"][0]

    aborted_before = health()["aborted"]
    # End-of-generation tokens banned: only the disconnect can end this request early.
    body = {
        "messages": [{"role": "user", "content": "A question no other test asks: why do tides turn?"}],
        "max_tokens": 1900,
        "stream": True,
        "temperature": 0,
        "logit_bias": {"0": -100, "1": -100, "2": -100},
    }
    with httpx.Client(timeout=30) as c, c.stream("POST", server.url + "/chat/completions", json=body) as r:
        got = 0
        for line in r.iter_lines():
            got += line.startswith("data:")
            if got > 5:
                mid = health()
                break
    assert mid["running"] == 1 and mid["kv_cells"] > 0
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        m = health()
        if m["running"] == 0:
            break
        time.sleep(0.05)
    assert m["running"] == 0 and m["kv_cells"] == 0
    assert m["aborted"] == aborted_before + 1
    # what it computed was kept as a cached prefix: the same question again starts from it
    again = httpx.post(
        server.url + "/chat/completions", json={**body, "stream": False, "max_tokens": 1}, timeout=60
    )
    usage = again.json()["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] >= usage["prompt_tokens"] - 16, usage


def test_context_full_finishes_with_length(tiny_model_path: Path, tmp_path: Path) -> None:
    with start_server(tiny_model_path, "-ctx", "128", home=tmp_path) as s:
        n_ctx = httpx.get(s.base + "/health").json()["models"][0]["context"]
        assert 128 <= n_ctx <= 512  # llama.cpp may round the size up
        c = openai.OpenAI(base_url=s.url, api_key="x", max_retries=0)
        r = c.completions.create(
            model="",
            prompt=list(range(5, 105)),
            max_tokens=5000,
            temperature=0,
            logit_bias={str(t): -100 for t in range(3)},
        )
        assert r.choices[0].finish_reason == "length"
        assert r.usage.prompt_tokens + r.usage.completion_tokens == n_ctx
        assert s.alive()


def test_queue_full_gets_503_with_retry_after(tiny_model_path: Path, tmp_path: Path) -> None:
    """One sequence runs, one waits, the next is refused. Each step is reached by watching the
    server's own counts, not by racing threads, so the outcome is the same on any machine."""
    args = ("-concurrency", "1", "-queue", "1", "-ctx", "8192")
    with start_server(tiny_model_path, *args, home=tmp_path) as s:
        no_end = {str(t): -100 for t in range(3)}  # generate to max_tokens
        long = {"messages": PROMPT, "max_tokens": 6000, "temperature": 0, "logit_bias": no_end}
        short = {"messages": PROMPT, "max_tokens": 8, "temperature": 0}

        def load() -> tuple[int, int]:
            m = httpx.get(s.base + "/health", timeout=60).json()["models"][0]
            return int(m["running"]), int(m["waiting"])

        with cf.ThreadPoolExecutor(2) as pool:
            running = pool.submit(httpx.post, s.url + "/chat/completions", json=long, timeout=300)
            while load()[0] < 1:
                assert not running.done(), running.result().text
                time.sleep(0.02)
            queued = pool.submit(httpx.post, s.url + "/chat/completions", json=short, timeout=300)
            while load()[1] < 1:
                assert not running.done(), "the long request ended before the second one queued"
                assert not queued.done(), queued.result().text
                time.sleep(0.02)
            busy = httpx.post(s.url + "/chat/completions", json=short, timeout=60)
            assert busy.status_code == 503, busy.text
            assert busy.headers["retry-after"].isdigit() and "queue" in busy.json()["error"]["message"]
            assert running.result().status_code == 200 and queued.result().status_code == 200
        assert httpx.post(s.url + "/chat/completions", json=short, timeout=60).status_code == 200


def test_stalled_reader_is_dropped_and_its_kv_freed(tiny_model_path: Path, tmp_path: Path) -> None:
    import socket

    with start_server(
        tiny_model_path, "-ctx", "8192", home=tmp_path, env={"LLAMAY_CLIENT_TIMEOUT": "2"}
    ) as s:
        body = (
            b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8000, "stream": true, '
            b'"logit_bias": {"0": -100, "1": -100, "2": -100}, "logprobs": true, "top_logprobs": 20}'
        )
        host, port = s.base.removeprefix("http://").split(":")
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting, so it holds
        sock.connect((host, int(port)))
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
                     b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)  # fmt: skip
        sock.recv(1024)  # the response has started; now read nothing more
        deadline = time.monotonic() + 30
        health = {}
        while time.monotonic() < deadline:
            health = httpx.get(s.base + "/health").json()["models"][0]
            if health["aborted"] >= 1 and health["running"] == 0:
                break
            time.sleep(0.2)
        sock.close()
        assert health["aborted"] >= 1 and health["running"] == 0 and health["kv_cells"] == 0, (
            health,
            s.log()[-2000:],
        )


def test_stalled_request_body_is_a_408(tiny_model_path: Path, tmp_path: Path) -> None:
    import socket

    with start_server(tiny_model_path, home=tmp_path, env={"LLAMAY_CLIENT_TIMEOUT": "1"}) as s:
        host, port = s.base.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(
                b'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-length: 100\r\n\r\n{"mess'
            )
            sock.settimeout(20)
            reply = b""
            while b"stalled" not in reply:
                got = sock.recv(4096)
                if not got:
                    break
                reply += got
        assert reply.startswith(b"HTTP/1.1 408") and b"stalled" in reply
        assert httpx.get(s.base + "/health").status_code == 200

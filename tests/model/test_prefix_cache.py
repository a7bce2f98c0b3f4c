"""The automatic prefix cache through a real server: exact cached_tokens, and a hit never
changes output."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.serverproc import ServerProc, start_server

SYSTEM = "You are a careful assistant. " * 30


@pytest.fixture(scope="module")
def server(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    with start_server(tiny_model_path, "-ctx", "4096", home=tmp_path_factory.mktemp("home")) as s:
        yield s


@pytest.fixture()
def client(server: ServerProc) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key="x", max_retries=0, timeout=60)


def ask(client: openai.OpenAI, messages: list[dict], n: int = 20) -> tuple[str, int, int]:
    r = client.chat.completions.create(model="", messages=messages, temperature=0, max_tokens=n)
    u = r.usage
    return r.choices[0].message.content or "", u.prompt_tokens, u.prompt_tokens_details.cached_tokens


def tokens_of(server: ServerProc, text: str) -> int:
    r = httpx.post(server.url + "/completions", json={"prompt": text, "max_tokens": 1}).json()
    return int(r["usage"]["prompt_tokens"])


def test_shared_system_prompt_is_reused_exactly(
    client: openai.OpenAI, tiny_model_path: Path, tmp_path: Path
) -> None:
    first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "first question"}]
    second = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "another thing entirely"}]
    _, p1, c1 = ask(client, first)
    warm, p2, c2 = ask(client, second)
    assert c1 == 0
    # Everything up to where the two prompts differ comes from the cache, and nothing more.
    assert 0.8 * p1 < c2 < p2
    with start_server(tiny_model_path, "-ctx", "4096", home=tmp_path) as cold_server:
        cold_client = openai.OpenAI(base_url=cold_server.url, api_key="x", max_retries=0)
        cold, _, c0 = ask(cold_client, second)
    assert c0 == 0 and warm == cold


def test_cached_tokens_count_is_exact_for_a_repeat(client: openai.OpenAI) -> None:
    msgs = [{"role": "user", "content": "repeat me exactly please " * 5}]
    _, p1, _ = ask(client, msgs, 5)
    _, p2, c2 = ask(client, msgs, 5)
    assert p1 == p2 and c2 == p2 - 2  # the last two prompt tokens are recomputed (see engine/scheduler.py)


def test_multi_turn_chat_reuses_the_previous_turn(client: openai.OpenAI) -> None:
    turn1 = [{"role": "user", "content": "Tell me a story about a dog."}]
    reply, p1, _ = ask(client, turn1, 30)
    turn2 = turn1 + [{"role": "assistant", "content": reply}, {"role": "user", "content": "And then?"}]
    _, p2, c2 = ask(client, turn2, 10)
    assert c2 >= p1 - 2  # the first prompt came from the cache (the reply is recomputed as prompt)


@pytest.mark.parametrize("flash_attn", ["off", "on"])
def test_an_idle_prefix_still_hits(tiny_model_path: Path, tmp_path: Path, flash_attn: str) -> None:
    """Without flash attention an idle prefix moves to RAM (idle cells would widen every
    step's attention); with it, it stays in the KV cache (a move would cost a state copy
    before the next prompt). Either way the next request hits it, with the same output."""
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "kept in ram"}]
    flags = ("-ctx", "4096", "-flash-attn", flash_attn)
    with start_server(tiny_model_path, *flags, home=tmp_path / "warm") as server:
        client = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0, timeout=60)
        _, p1, _ = ask(client, msgs, 5)
        held = httpx.get(server.base + "/health").json()["models"][0]
        assert held["cache_cells"] >= p1 - 2 and held["ram_cache"]["entries"] == 0
        for i in range(4):  # other work
            ask(client, [{"role": "user", "content": f"unrelated question number {i} " * 6}], 5)
        after = httpx.get(server.base + "/health").json()["models"][0]
        if flash_attn == "off":
            assert after["cache_cells"] < p1 and after["ram_cache"]["entries"] >= 1
        else:
            assert after["cache_cells"] >= p1 - 2 and after["ram_cache"]["entries"] == 0
        warm, p2, c2 = ask(client, msgs, 20)
    assert p2 == p1 and c2 == p2 - 2  # a hit, exactly as far as it was kept
    with start_server(tiny_model_path, *flags, home=tmp_path / "cold") as cold_server:
        cold_client = openai.OpenAI(base_url=cold_server.url, api_key="x", max_retries=0)
        cold, _, c0 = ask(cold_client, msgs, 20)
    assert c0 == 0 and warm == cold


def test_prompts_read_together_compute_their_common_start_once(tiny_model_path: Path, tmp_path: Path) -> None:
    """Four prompts that start alike, submitted together and read 16 tokens a step (so all
    four are running before the first has read its start): one computes the common start,
    the others wait for it and share its cells, and each says what it would alone."""
    system = "Summarise the document that follows in one line. " * 12
    prompts = [system + f"Document {i}: the {w} arrived late." for i, w in enumerate(["cat", "van", "mail", "rain"])]
    with start_server(tiny_model_path, "-ctx", "4096", "-batch", "16", home=tmp_path) as server:
        client = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0, timeout=60)
        together = client.completions.create(model="", prompt=prompts, temperature=0, max_tokens=8)
        assert together.usage.prompt_tokens_details is not None
        cached = together.usage.prompt_tokens_details.cached_tokens
        shared = tokens_of(server, system) - 2  # (after: this request caches the start too)
        assert 3 * shared <= cached < 4 * shared  # every prompt but the first took the common start
        for choice in together.choices:
            alone = httpx.post(server.url + "/completions", timeout=60,
                           json={"prompt": prompts[choice.index], "temperature": 0, "max_tokens": 8,
                                 "cache_prompt": False}).json()  # fmt: skip
            assert alone["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
            assert choice.text == alone["choices"][0]["text"]

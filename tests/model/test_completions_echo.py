"""/v1/completions with `echo` and `logprobs` on a real server: the prompt's own tokens are
scored (lm-evaluation-harness's `local-completions` log-likelihood requests), and
`max_tokens` 0 reads the prompt only."""

from __future__ import annotations

import concurrent.futures as cf
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llamay.backend.model import Model
from tests.serverproc import ServerProc, start_server

TEXT = "The little dog ran to the house and then the cat sat on the old mat by the door. "


@pytest.fixture(scope="module")
def server(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    home = tmp_path_factory.mktemp("home")
    # A small batch: long prompts are decoded over many steps.
    args = ("-concurrency", "8", "-ctx", "4096", "-batch", "64")
    with start_server(tiny_model_path, *args, home=home) as s:
        yield s


@pytest.fixture(scope="module")
def model(tiny_model_path: Path) -> Iterator[Model]:
    with Model(tiny_model_path) as m:
        yield m


def complete(server: ServerProc, **body: Any) -> dict[str, Any]:
    r = httpx.post(server.url + "/completions", json={"model": "", **body}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def next_token_top(server: ServerProc, prefix: list[int]) -> dict[str, float]:
    """What generating after `prefix` reports for its first token: the top 5 logprobs."""
    r = complete(server, prompt=prefix, max_tokens=1, logprobs=5, temperature=0, cache_prompt=False)
    return r["choices"][0]["logprobs"]["top_logprobs"][0]


def check_scores(
    server: ServerProc, tokens: list[int], lp: dict[str, Any], positions: range | list[int]
) -> None:
    for i in positions:
        ref = next_token_top(server, tokens[:i])
        got = lp["top_logprobs"][i]
        shared = set(ref) & set(got)
        assert shared, (i, ref, got)
        for key in shared:
            assert got[key] == pytest.approx(ref[key], abs=1e-3), (i, key)
        if lp["tokens"][i] in ref:
            assert lp["token_logprobs"][i] == pytest.approx(ref[lp["tokens"][i]], abs=1e-3)


def test_prompt_logprobs_equal_each_prefixs_next_token_logprobs(server: ServerProc, model: Model) -> None:
    tokens = model.tokenize(TEXT, add_special=False)[:30]
    r = complete(server, prompt=tokens, echo=True, logprobs=5, max_tokens=0, temperature=0)
    (choice,) = r["choices"]
    lp = choice["logprobs"]
    assert choice["finish_reason"] == "length"
    assert choice["text"] == model.detokenize(tokens)
    assert lp["tokens"] == [model.piece(t).decode("utf-8", "replace") for t in tokens]
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert all(isinstance(x, float) and x <= 0 for x in lp["token_logprobs"][1:])
    for i in range(1, len(tokens)):  # the actual token is always listed, as OpenAI does
        assert lp["top_logprobs"][i][lp["tokens"][i]] == lp["token_logprobs"][i]
        assert len(lp["top_logprobs"][i]) >= 5 or len(set(lp["tokens"])) < 5
    offsets = lp["text_offset"]
    assert offsets[0] == 0 and offsets == sorted(offsets)
    for off, tok in zip(offsets, lp["tokens"], strict=True):
        assert choice["text"][off : off + len(tok)] == tok
    assert r["usage"]["prompt_tokens"] == len(tokens) and r["usage"]["completion_tokens"] == 0
    check_scores(server, tokens, lp, range(2, len(tokens)))


def test_echo_with_generation_appends_the_generated_tokens(server: ServerProc, model: Model) -> None:
    tokens = model.tokenize(TEXT, add_special=False)[:12]
    plain = complete(server, prompt=tokens, logprobs=2, max_tokens=5, temperature=0)["choices"][0]
    r = complete(server, prompt=tokens, echo=True, logprobs=2, max_tokens=5, temperature=0)
    (choice,) = r["choices"]
    prompt_text = model.detokenize(tokens)
    assert choice["text"] == prompt_text + plain["text"]
    lp = choice["logprobs"]
    n = len(tokens)
    assert len(lp["tokens"]) == n + len(plain["logprobs"]["tokens"])
    assert lp["tokens"][n:] == plain["logprobs"]["tokens"]
    assert lp["token_logprobs"][n:] == plain["logprobs"]["token_logprobs"]
    assert lp["text_offset"][n] == len(prompt_text)


def test_max_tokens_zero_without_echo_is_empty(server: ServerProc) -> None:
    r = complete(server, prompt="The river", max_tokens=0)
    assert r["choices"][0]["text"] == "" and r["choices"][0]["finish_reason"] == "length"
    assert r["usage"]["completion_tokens"] == 0
    chat = httpx.post(
        server.url + "/chat/completions",
        json={"model": "", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 0},
        timeout=30,
    )
    assert chat.status_code == 400 and "max_tokens" in chat.text


def test_a_long_prompt_spans_many_batches(server: ServerProc, model: Model) -> None:
    tokens = (model.tokenize(TEXT * 80, add_special=False))[:1200]
    assert len(tokens) == 1200
    r = complete(server, prompt=tokens, echo=True, logprobs=1, max_tokens=0, temperature=0)
    lp = r["choices"][0]["logprobs"]
    assert len(lp["token_logprobs"]) == 1200 and lp["token_logprobs"][0] is None
    assert all(math.isfinite(x) for x in lp["token_logprobs"][1:])
    check_scores(server, tokens, lp, [1, 63, 64, 65, 500, 1199])


def test_a_list_of_prompts_gives_one_choice_each(server: ServerProc, model: Model) -> None:
    prompts = [model.tokenize(TEXT * (k + 1), add_special=False)[: 10 + 7 * k] for k in range(4)]
    r = complete(server, prompt=prompts, echo=True, logprobs=1, max_tokens=0, temperature=0)
    assert [c["index"] for c in r["choices"]] == [0, 1, 2, 3]
    for c, p in zip(r["choices"], prompts, strict=True):
        assert len(c["logprobs"]["tokens"]) == len(p)
        assert c["text"] == model.detokenize(p)
        alone = complete(server, prompt=p, echo=True, logprobs=1, max_tokens=0, temperature=0)["choices"][0]
        assert c["logprobs"]["token_logprobs"] == pytest.approx(alone["logprobs"]["token_logprobs"], abs=1e-6)
    assert r["usage"]["prompt_tokens"] == sum(len(p) for p in prompts)
    assert r["usage"]["total_tokens"] == sum(len(p) for p in prompts)


def test_scoring_does_not_disturb_a_concurrent_greedy_request(server: ServerProc, model: Model) -> None:
    body = {"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0}
    alone = complete(server, **body)["choices"][0]["text"]
    long_prompt = model.tokenize(TEXT * 60, add_special=False)[:900]
    with cf.ThreadPoolExecutor(3) as pool:
        scoring = [
            pool.submit(complete, server, prompt=long_prompt, echo=True, logprobs=3, max_tokens=0)
            for _ in range(2)
        ]
        mine = pool.submit(complete, server, **body)
        assert mine.result()["choices"][0]["text"] == alone
        assert all(len(f.result()["choices"][0]["logprobs"]["tokens"]) == 900 for f in scoring)


def test_streaming_echo_with_logprobs_is_refused(server: ServerProc) -> None:
    r = httpx.post(
        server.url + "/completions",
        json={"model": "", "prompt": "The river", "echo": True, "logprobs": 1, "stream": True},
        timeout=30,
    )
    assert r.status_code == 400 and "stream" in r.text


def lm_eval_parse(out: dict[str, Any], ctxlens: list[int], last: int) -> list[tuple[float, bool]]:
    """How lm-evaluation-harness's local-completions reads a log-likelihood reply: the
    continuation's logprobs (without the `last` generated tokens) and whether each was the
    top-1 of its position."""
    res = []
    for choice, ctxlen in zip(sorted(out["choices"], key=lambda c: c["index"]), ctxlens, strict=True):
        end = len(choice["logprobs"]["token_logprobs"]) - last
        lps = choice["logprobs"]["token_logprobs"][ctxlen:end]
        tops = choice["logprobs"]["top_logprobs"][ctxlen:end]
        is_greedy = all(lp == max(top.values()) for lp, top in zip(lps, tops, strict=True))
        res.append((sum(lps), is_greedy))
    return res


@pytest.mark.parametrize("max_tokens", [0, 1])
def test_lm_eval_loglikelihood_request(server: ServerProc, model: Model, max_tokens: int) -> None:
    context = model.tokenize("The little dog ran to the", add_special=False)
    greedy = complete(server, prompt=context, max_tokens=3, temperature=0, logprobs=1)["choices"][0]
    cont_greedy = [model.tokenize(t, add_special=False) for t in greedy["logprobs"]["tokens"]]
    cont = [t for ids in cont_greedy for t in ids]
    assert model.detokenize(cont) == greedy["text"]
    other = model.tokenize(" zebra", add_special=False)
    prompts = [context + cont, context + other]
    body = {
        "model": "",
        "prompt": prompts,
        "echo": True,
        "logprobs": 1,
        "max_tokens": max_tokens,
        "temperature": 0,
        "seed": 1234,
    }
    out = complete(server, **body)
    (g_lp, g_greedy), (o_lp, o_greedy) = lm_eval_parse(out, [len(context)] * 2, max_tokens)
    assert g_greedy and not o_greedy
    assert g_lp == pytest.approx(sum(greedy["logprobs"]["token_logprobs"]), abs=1e-3)
    assert o_lp < g_lp

"""lm-evaluation-harness's `local-completions` model against the real default model, end to end.

lm-eval itself is not installed: besides its own core (datasets, evaluate, scikit-learn,
sacrebleu ...), `local-completions` tokenizes with a Hugging Face tokenizer fetched from the hub
(transformers) unless the server has /tokenize and /tokenizer_info, which llamay does not serve.
So this module replays what it sends and how it reads the answers, written after
lm_eval/models/openai_completions.py (`LocalCompletionsAPI._create_payload`, `parse_logprobs`),
lm_eval/models/api_models.py (`TemplateAPI.create_message`, `batch_loglikelihood_requests`,
`_loglikelihood_tokens`) and lm_eval/api/model.py (`TemplateLM._encode_pair`) at
EleutherAI/lm-evaluation-harness commit 4e7e0d47f33bc71070c1d38394bafbb52b117163. The tokenizer
is the model's own (what a Hugging Face tokenizer of SmolLM2 gives, without special tokens,
as lm-eval's default `add_bos_token=False` asks)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from llamay.backend.model import Model
from llamay.store import ModelStore
from tests.serverproc import ServerProc, start_server

pytestmark = pytest.mark.slow

MAX_LENGTH = 2048 - 1  # lm-eval's default max_length, less the one token it keeps for generation
SEED = 1234  # lm-eval's default seed, sent with every request

# Easy items a 135M model should mostly get: (context, choices, index of the right one).
ITEMS: list[tuple[str, list[str], int]] = [
    ("The capital of France is", [" Paris", " Banana", " Tuesday", " Seven"], 0),
    ("Monday, Tuesday, Wednesday,", [" Thursday", " April", " purple", " elephant"], 0),
    ("One, two, three, four,", [" five", " cat", " blue", " yesterday"], 0),
    ("The sun rises in the", [" east", " cheese", " piano", " Wednesday"], 0),
    ("The opposite of hot is", [" cold", " spoon", " seventeen", " Mars"], 0),
    ("A, B, C, D, E,", [" F", " dog", " 12", " soup"], 0),
    ("Water is made of hydrogen and", [" oxygen", " bicycles", " Tuesday", " music"], 0),
    ("Cats and dogs are", [" animals", " spoons", " numbers", " planets"], 0),
]


@pytest.fixture(scope="module")
def model_path() -> Path:
    return ModelStore().resolve(None).path  # fetched once into the real home, as a user has it


@pytest.fixture(scope="module")
def server(model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    # Its own home: a server holds its home's context store, and other servers may hold the real one.
    with start_server(model_path, home=tmp_path_factory.mktemp("home"), timeout=600) as s:
        yield s


@pytest.fixture(scope="module")
def model(model_path: Path) -> Iterator[Model]:
    with Model(model_path) as m:
        yield m


@dataclass(frozen=True)
class Request:
    context_enc: list[int]
    continuation_enc: list[int]


def encode_pair(model: Model, context: str, continuation: str) -> Request:
    """`_encode_pair` for a causal model: trailing spaces of the context go to the
    continuation, the whole is tokenized once and split at the context's own length."""
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces:
        continuation = context[-n_spaces:] + continuation
        context = context[:-n_spaces]
    whole = model.tokenize(context + continuation, add_special=False)
    ctx = model.tokenize(context, add_special=False)
    return Request(ctx, whole[len(ctx) :])


def payload(prompt: list[list[int]] | list[str] | str, max_tokens: int) -> dict[str, Any]:
    """`_create_payload(generate=False)`: lm-eval always sends max_tokens 1; 0 is the variant
    that reads the prompt only (then the last prompt token is not dropped when parsing)."""
    return {
        "model": "",
        "prompt": prompt,
        "temperature": 0,
        "max_tokens": max_tokens,
        "logprobs": 1,
        "seed": SEED,
        "echo": True,
    }


def parse_logprobs(out: dict[str, Any], ctxlens: list[int], generated: int) -> list[tuple[float, bool]]:
    """`parse_logprobs`: choices in index order; the continuation's logprobs are those from
    `ctxlen` on, less the `generated` tokens at the end ([ctxlen:-1] for lm-eval's max_tokens
    1); greedy when every one equals the best of its position's top_logprobs."""
    res = []
    for choice, ctxlen in zip(sorted(out["choices"], key=lambda c: c["index"]), ctxlens, strict=True):
        assert ctxlen > 0
        end = len(choice["logprobs"]["token_logprobs"]) - generated
        lps = choice["logprobs"]["token_logprobs"][ctxlen:end]
        tops = choice["logprobs"]["top_logprobs"][ctxlen:end]
        is_greedy = True
        for lp, top in zip(lps, tops, strict=True):
            if lp != max(top.values()):
                is_greedy = False
                break
        res.append((sum(lps), is_greedy))
    return res


def loglikelihood(
    server: ServerProc,
    model: Model,
    requests: list[Request],
    *,
    batch_size: int,
    tokenized: bool,
    max_tokens: int = 1,
) -> list[tuple[float, bool]]:
    """`_loglikelihood_tokens` with one request at a time (num_concurrent 1): longest first
    (the Collator's order), `batch_size` prompts per request, answers put back in the
    callers' order. `tokenized=False` is `tokenized_requests=False`: prompts go as the text
    the tokens decode to, a bare string when the batch size is 1."""
    order = sorted(
        range(len(requests)),
        key=lambda i: (
            -len(requests[i].context_enc + requests[i].continuation_enc),
            tuple(requests[i].context_enc + requests[i].continuation_enc),
        ),
    )
    results: dict[int, tuple[float, bool]] = {}
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        inputs, ctxlens = [], []
        for i in chunk:  # batch_loglikelihood_requests: left-truncated to max_length
            ctx, cont = requests[i].context_enc, requests[i].continuation_enc
            inputs.append((ctx + cont)[-MAX_LENGTH:])
            ctxlens.append(len(ctx) - max(0, len(ctx) + len(cont) - MAX_LENGTH))
        prompt: list[list[int]] | list[str] | str = inputs
        if not tokenized:
            texts = [model.detokenize(toks) for toks in inputs]
            prompt = texts[0] if batch_size <= 1 else texts
        r = httpx.post(server.url + "/completions", json=payload(prompt, max_tokens), timeout=300)
        assert r.status_code == 200, r.text
        out = r.json()
        for choice, toks in zip(sorted(out["choices"], key=lambda c: c["index"]), inputs, strict=True):
            # The server read exactly the tokens lm-eval counted ctxlen in, then generated.
            assert len(choice["logprobs"]["token_logprobs"]) == len(toks) + max_tokens
        for i, answer in zip(chunk, parse_logprobs(out, ctxlens, max_tokens), strict=True):
            results[i] = answer
    return [results[i] for i in range(len(requests))]


def server_scores(server: ServerProc, prompts: list[list[int]]) -> list[list[float]]:
    """The server's own scores of each prompt's tokens: a separate echo request that reads
    the prompts only (position 0 has none)."""
    body = {"model": "", "prompt": prompts, "echo": True, "logprobs": 1, "max_tokens": 0, "temperature": 0}
    r = httpx.post(server.url + "/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    choices = sorted(r.json()["choices"], key=lambda c: c["index"])
    return [c["logprobs"]["token_logprobs"][1:] for c in choices]


def greedy_tokens(server: ServerProc, contexts: list[list[int]], n: int) -> list[list[str]]:
    """The first `n` tokens greedy decoding writes after each context (as token strings)."""
    body = {"model": "", "prompt": contexts, "max_tokens": n, "temperature": 0, "logprobs": 1}
    r = httpx.post(server.url + "/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    return [c["logprobs"]["tokens"] for c in sorted(r.json()["choices"], key=lambda c: c["index"])]


@pytest.fixture(scope="module")
def requests(model: Model) -> list[Request]:
    return [encode_pair(model, ctx, choice) for ctx, choices, _ in ITEMS for choice in choices]


@pytest.fixture(scope="module")
def answers(server: ServerProc, model: Model, requests: list[Request]) -> list[tuple[float, bool]]:
    """The run as lm-eval makes it by default: token-id prompts, max_tokens 1, 4 per request."""
    return loglikelihood(server, model, requests, batch_size=4, tokenized=True)


def test_loglikelihoods_are_the_servers_scores_of_the_continuation(
    server: ServerProc, requests: list[Request], answers: list[tuple[float, bool]]
) -> None:
    all_scores = server_scores(server, [r.context_enc + r.continuation_enc for r in requests])
    for req, (ll, is_greedy), scores in zip(requests, answers, all_scores, strict=True):
        assert isinstance(is_greedy, bool)
        assert math.isfinite(ll) and ll < 0
        # Position i of the scores is the logprob of token i + 1 given the tokens before it.
        cont = scores[len(req.context_enc) - 1 :]
        assert len(cont) == len(req.continuation_enc)
        assert ll == pytest.approx(sum(cont), abs=1e-4)


def test_is_greedy_means_greedy_decoding_writes_the_continuation(
    server: ServerProc, model: Model, requests: list[Request], answers: list[tuple[float, bool]]
) -> None:
    # The greedy continuation of the first item, scored as a choice of its own, must be greedy.
    (first,) = greedy_tokens(server, [requests[0].context_enc], 3)
    extra = encode_pair(model, ITEMS[0][0], "".join(first))
    (extra_answer,) = loglikelihood(server, model, [extra], batch_size=1, tokenized=True)
    checked = [*zip(requests, answers, strict=True), (extra, extra_answer)]
    longest = max(len(req.continuation_enc) for req, _ in checked)
    written = greedy_tokens(server, [req.context_enc for req, _ in checked], longest)
    for (req, (_, is_greedy)), tokens in zip(checked, written, strict=True):
        want = [model.piece(t).decode("utf-8", "replace") for t in req.continuation_enc]
        assert is_greedy == (tokens[: len(want)] == want), (tokens, want)
    assert extra_answer[1] is True
    assert not all(g for _, g in answers)


def test_accuracy_on_easy_items_is_above_chance(answers: list[tuple[float, bool]]) -> None:
    correct = 0
    for k, (_, choices, gold) in enumerate(ITEMS):
        lls = [ll for ll, _ in answers[4 * k : 4 * k + len(choices)]]
        correct += max(range(len(choices)), key=lambda j: lls[j]) == gold
    accuracy = correct / len(ITEMS)
    assert accuracy >= 0.75, accuracy  # chance is 0.25


@pytest.mark.parametrize(("batch_size", "tokenized"), [(1, False), (32, True)])
def test_every_request_shape_gives_the_same_answers(
    server: ServerProc,
    model: Model,
    requests: list[Request],
    answers: list[tuple[float, bool]],
    batch_size: int,
    tokenized: bool,
) -> None:
    """One prompt or a list per request, token ids or text: the same numbers. One text prompt
    per request takes the first two items only (a request each: the slowest shape)."""
    n = 8 if batch_size == 1 else len(requests)
    got = loglikelihood(server, model, requests[:n], batch_size=batch_size, tokenized=tokenized)
    assert [g for _, g in got] == [g for _, g in answers[:n]]
    assert [ll for ll, _ in got] == pytest.approx([ll for ll, _ in answers[:n]], abs=1e-4)


def test_max_tokens_zero_reads_the_prompt_only_and_agrees(
    server: ServerProc, model: Model, requests: list[Request], answers: list[tuple[float, bool]]
) -> None:
    got = loglikelihood(server, model, requests, batch_size=4, tokenized=True, max_tokens=0)
    assert [g for _, g in got] == [g for _, g in answers]
    assert [ll for ll, _ in got] == pytest.approx([ll for ll, _ in answers], abs=1e-4)

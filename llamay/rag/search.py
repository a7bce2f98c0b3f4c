"""Ranking passages: by vector similarity, by keywords (BM25), and fused (reciprocal rank
fusion).  Every function ranks only the rows a boolean `readable` mask allows, and computes
every statistic over those rows alone, so hidden passages change neither scores nor order.

BM25 here is the Okapi formula FTS5's ``bm25()`` uses (k1 = 1.2, b = 0.75), with the
non-negative IDF ``ln(1 + (N - n + 0.5) / (n + 0.5))``, where N is the number of readable
passages, n the readable passages holding the term, and the length normalisation uses the
readable passages' average length.  FTS5's own ``bm25()`` takes N, n and the average length
from the whole table, which would let hidden passages shift the ranking; FTS5 supplies the
term occurrences (its fts5vocab "instance" table) and the statistics are computed here.
Query terms are FTS5's (unicode61: letters and digits, lower-cased), without English stop words
(see `llamay.rag.store.query_terms`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

__all__ = ["BLOCK", "BM25_B", "BM25_K1", "RRF_K", "bm25_scores", "top_rows", "rrf", "vector_scores"]

BM25_K1 = 1.2
BM25_B = 0.75
#: The constant of reciprocal rank fusion (Cormack et al. 2009).
RRF_K = 60
#: Rows multiplied at once in a vector search.
BLOCK = 1024


def top_rows(scores: np.ndarray, candidates: np.ndarray, depth: int) -> list[int]:
    """The `depth` best of the row numbers `candidates` by `scores` (indexed by row), best
    first; ties go to the lower row number."""
    if depth <= 0 or candidates.size == 0:
        return []
    values = scores[candidates]
    if candidates.size > depth:
        keep = np.argpartition(-values, depth - 1)[:depth]
        cut = values[keep].min()
        keep = np.nonzero(values >= cut)[0]  # every row tied with the last keeps its chance
        candidates, values = candidates[keep], values[keep]
    order = np.lexsort((candidates, -values))
    return [int(r) for r in candidates[order][:depth]]


def vector_scores(
    vectors: np.ndarray, query: np.ndarray, readable: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(scores by row, readable row numbers): the cosine similarity of each readable row of
    `vectors` (unit rows) with the unit `query`; unreadable rows score -inf and are never
    multiplied.  The readable rows are taken `BLOCK` at a time, in order, so a row's score is
    the same arithmetic as in an index of the readable rows alone; small blocks also keep
    BLAS single-threaded, which on a busy machine is ten times faster than its threads."""
    rows = np.nonzero(readable)[0]
    scores = np.full(len(vectors), -np.inf, dtype=np.float32)
    q = query.astype(np.float32)
    every = rows.size == len(vectors)
    for lo in range(0, rows.size, BLOCK):
        block = vectors[lo : lo + BLOCK] if every else vectors[rows[lo : lo + BLOCK]]
        scores[rows[lo : lo + BLOCK]] = block @ q
    return scores, rows


def bm25_scores(
    occurrences: Iterable[np.ndarray], lengths: np.ndarray, readable: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(scores by row, matching readable row numbers) for a query whose terms occur in the rows
    given by each array of `occurrences` (one array per distinct query term: the row of every
    occurrence, repeated per occurrence).  `lengths` are the rows' numbers of terms."""
    n_rows = len(lengths)
    scores = np.zeros(n_rows, dtype=np.float64)
    matched = np.zeros(n_rows, dtype=bool)
    n_readable = int(readable.sum())
    if n_readable == 0:
        return scores, np.zeros(0, dtype=np.int64)
    avg_len = max(float(lengths[readable].mean()), 1e-9)
    for rows in occurrences:
        rows = rows[readable[rows]]
        if rows.size == 0:
            continue
        tf = np.bincount(rows, minlength=n_rows)
        hit = np.nonzero(tf)[0]
        n = hit.size
        idf = np.log(1.0 + (n_readable - n + 0.5) / (n + 0.5))
        f = tf[hit].astype(np.float64)
        norm = BM25_K1 * (1.0 - BM25_B + BM25_B * lengths[hit] / avg_len)
        scores[hit] += idf * f * (BM25_K1 + 1.0) / (f + norm)
        matched[hit] = True
    return scores, np.nonzero(matched)[0]


def rrf(rankings: Sequence[Sequence[int]], k: int = RRF_K) -> list[tuple[int, float]]:
    """Reciprocal rank fusion: (item, score) best first, where an item's score is the sum over
    the rankings that hold it of ``1 / (k + rank)`` (rank 1 = first).  Ties go to the item that
    ranks best in any single ranking, then to the lower item."""
    fused: dict[int, float] = {}
    best: dict[int, int] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            fused[item] = fused.get(item, 0.0) + 1.0 / (k + rank)
            best[item] = min(best.get(item, rank), rank)
    return sorted(fused.items(), key=lambda kv: (-kv[1], best[kv[0]], kv[0]))

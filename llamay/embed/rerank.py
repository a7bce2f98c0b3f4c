"""Reranking documents against a query: with a cross-encoder when one is loaded, else by the
cosine similarity of embeddings.

A cross-encoder (rank-pooling GGUF) reads each pair ``[BOS] query [EOS] document [EOS]`` and
gives one raw logit; the relevance score is its sigmoid, in (0, 1).  The embedding method scores
with the cosine similarity of the query's and the document's unit vectors, in [-1, 1].
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from .api import require_embedder
from .inputs import input_sequences, pair_sequence
from .service import Encoder
from .vectors import l2_normalize

__all__ = ["Method", "Ranked", "Reranked", "rerank", "sigmoid"]

Method = Literal["cross-encoder", "embedding"]


@dataclass(frozen=True)
class Ranked:
    """One document's place: its `index` in the request, `score` (relevance) and, from a
    cross-encoder, the raw `logit`."""

    index: int
    score: float
    logit: float | None = None


@dataclass(frozen=True)
class Reranked:
    """Every document, best first (ties keep request order); `n_tokens` read; the `method`
    used and the `model` (encoder name) that scored."""

    ranked: list[Ranked]
    n_tokens: int
    method: Method
    model: str


def sigmoid(x: np.ndarray) -> np.ndarray:
    """The logistic function, without overflow for large |x|."""
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _order(scores: Sequence[float], logits: Sequence[float] | None) -> list[Ranked]:
    ranked = [Ranked(i, float(s), None if logits is None else float(logits[i])) for i, s in enumerate(scores)]
    return sorted(ranked, key=lambda r: (-r.score, r.index))


async def _cross_encode(encoder: Encoder, query: str, documents: Sequence[str], truncate: bool) -> Reranked:
    def prepare() -> list[list[int]]:
        q = encoder.model.tokenize(query, add_special=False, parse_special=False)
        return [pair_sequence(encoder, q, d, truncate, f"documents[{i}]") for i, d in enumerate(documents)]

    seqs = await asyncio.to_thread(prepare)
    logits = (await encoder.encode(seqs))[:, 0] if seqs else np.zeros(0, dtype=np.float32)
    scores = sigmoid(logits)
    return Reranked(
        _order(scores.tolist(), logits.tolist()), sum(len(s) for s in seqs), "cross-encoder", encoder.name
    )


async def _by_embedding(encoder: Encoder, query: str, documents: Sequence[str], truncate: bool) -> Reranked:
    def prepare() -> list[list[int]]:
        require_embedder(encoder)
        q = input_sequences(encoder, [query], truncate, "query", indexed=False)
        return q + input_sequences(encoder, list(documents), truncate, "documents")

    seqs = await asyncio.to_thread(prepare)
    vectors = l2_normalize(await encoder.encode(seqs))
    scores = (vectors[1:] @ vectors[0]).astype(np.float64)
    return Reranked(_order(scores.tolist(), None), sum(len(s) for s in seqs), "embedding", encoder.name)


async def rerank(
    encoder: Encoder, query: str, documents: Sequence[str], *, truncate: bool = True
) -> Reranked:
    """Score every document against `query` with `encoder`: a reranker (kind "rank") as a
    cross-encoder, an embedder by cosine similarity.  `truncate` (default on, as rerank APIs
    do) shortens documents that do not fit; off, an over-long document is a ContextOverflow
    (400) naming ``documents[i]`` (or "query" for an over-long query)."""
    if encoder.kind == "rank":
        return await _cross_encode(encoder, query, documents, truncate)
    return await _by_embedding(encoder, query, documents, truncate)

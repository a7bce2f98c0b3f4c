"""Retrieval as ``POST /v1/retrieve`` and ``llamay retrieve`` do it.

1. The query is embedded with the index's embedding model (``encoders["embed"]``, which must
   be the model the index was built with).
2. The passages the reader may read are ranked by cosine similarity and by BM25 (`DEPTH`
   deep each, at least 2 x top_k); passages it may not read take no part in any ranking or
   statistic.
3. The two rankings are fused by reciprocal rank fusion: ``score = sum 1 / (60 + rank)``
   over the rankings holding the passage (at most 2/61 ~= 0.0328); ``method`` "hybrid".
4. With a reranker loaded (``encoders["rerank"]``, a cross-encoder), the best `RERANK_DEPTH`
   fused passages (at least top_k) are reordered by it and ``score`` is its relevance score
   (sigmoid of its logit, in (0, 1)); ``method`` "hybrid+rerank".
5. Passages scoring below `min_score` are dropped; the best `top_k` remain, best first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..embed import Encoder, embed_texts, rerank
from ..errors import EngineError, InvalidRequest, ModelNotFound
from .access import Reader
from .index import Hit, Index

__all__ = ["DEPTH", "MAX_TOP_K", "RERANK_DEPTH", "Retrieved", "query_encoder", "retrieve"]

DEPTH = 100
RERANK_DEPTH = 20
MAX_TOP_K = 100


@dataclass(frozen=True)
class Retrieved:
    """The passages found, best first, and how they were ranked."""

    hits: list[Hit]
    method: str

    def as_json(self) -> dict[str, Any]:
        """The /v1/retrieve response body."""
        return {"object": "list", "data": [h.as_json() for h in self.hits], "method": self.method}


def _bare(name: str) -> str:
    return name.removesuffix(":latest")


def query_encoder(index: Index, encoders: Mapping[str, Encoder]) -> Encoder:
    """The encoder that embeds queries for `index`: ``encoders["embed"]`` if it is the model
    the index was built with.  ModelNotFound when there is none, EngineError when it is
    another model (its vectors would not compare with the index's)."""
    encoder = encoders.get("embed")
    if encoder is None:
        raise ModelNotFound(
            f"the index was built with the embedding model {index.model}, which this server does "
            f"not hold; start it with -embed {index.model}",
            param="model",
        )
    if _bare(encoder.name) != _bare(index.model) or encoder.dim != index.dim:
        raise EngineError(
            f"the index was built with {index.model} ({index.dim} dimensions) but the server holds "
            f"{encoder.name} ({encoder.dim}); start it with -embed {index.model} or rebuild the index"
        )
    return encoder


async def retrieve(
    index: Index,
    encoders: Mapping[str, Encoder],
    query: str,
    reader: Reader,
    *,
    top_k: int = 5,
    min_score: float | None = None,
) -> Retrieved:
    """The best `top_k` (1..MAX_TOP_K) passages of `index` for `query` that `reader` may read
    (see the module docstring).  Errors: InvalidRequest for a blank query or a bad top_k, and
    those of `query_encoder`."""
    if not query.strip():
        raise InvalidRequest("'query' is empty", param="query")
    if not 1 <= top_k <= MAX_TOP_K:
        raise InvalidRequest(f"'top_k' must be between 1 and {MAX_TOP_K}", param="top_k")
    encoder = query_encoder(index, encoders)
    vectors, _ = await embed_texts(encoder, [query], True)
    reranker = encoders.get("rerank")
    reranking = reranker is not None and reranker.kind == "rank"
    limit = max(top_k, RERANK_DEPTH) if reranking else top_k
    hits = await asyncio.to_thread(
        index.search, query, vectors[0], reader, limit=limit, depth=max(DEPTH, 2 * top_k)
    )
    method = "hybrid"
    if reranking and reranker is not None and hits:
        got = await rerank(reranker, query, [h.text for h in hits])
        hits = [
            Hit(hits[r.index].text, hits[r.index].source, hits[r.index].start, hits[r.index].end, r.score)
            for r in got.ranked
        ]
        method = "hybrid+rerank"
    if min_score is not None:
        hits = [h for h in hits if h.score >= min_score]
    return Retrieved(hits[:top_k], method)

"""The embeddings facade: the encoders a server holds beside its chat models (-embed,
-rerank) and the retrieval index (-index) they serve, loaded together, and embedding
through them for routes that only name a model."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ModelNotFound

if TYPE_CHECKING:
    from ..embed import Encoder
    from ..rag import Index

__all__ = ["load_extras", "embed_with"]

log = logging.getLogger("llamay.runtime")


def load_extras(
    embed: str | None, rerank: str | None, index_path: Path | None, threads: int = 0
) -> tuple[dict[str, Encoder], Index | None]:
    """Encoders by role ("embed", "rerank") and the retrieval index, when asked for. An index
    records the embedding model it was built with, which is the default `embed`; an
    embedder other than the index's is refused. Nothing stays open when this raises."""
    index = None
    if index_path is not None:
        from ..rag import open_index

        index = open_index(index_path)
        embed = embed or index.model_source
        log.info("index opened", extra={"fields": {"path": str(index_path)}})
    encoders: dict[str, Encoder] = {}
    try:
        if embed or rerank:
            from ..embed import load_encoders

            encoders = load_encoders(embed, rerank, threads=threads)
            for kind, enc in encoders.items():
                log.info(
                    "encoder loaded", extra={"fields": {"role": kind, "model": enc.name, "dim": enc.dim}}
                )
        if index is not None:
            from ..rag import query_encoder

            query_encoder(index, encoders)  # refuses an embedder other than the index's
    except BaseException:
        for enc in encoders.values():
            enc.close()
        if index is not None:
            index.close()
        raise
    return encoders, index


async def embed_with(
    encoders: Mapping[str, Encoder], name: str, texts: Sequence[str], *, truncate: bool
) -> tuple[list[list[float]], int]:
    """Unit vectors for `texts` from the embedding model among `encoders`, and the tokens
    read; ModelNotFound (naming `name`) when there is none."""
    encoder = encoders.get("embed")
    if encoder is None:
        raise ModelNotFound(
            f"no embedding model is loaded for '{name}'; start the server with -embed MODEL",
            param="model",
        )
    from ..embed import embed_texts

    vectors, n_tokens = await embed_texts(encoder, texts, truncate)
    return vectors.astype(float).tolist(), n_tokens  # plain floats: JSON-ready

"""Embedding texts with an `Encoder`: what the HTTP routes (OpenAI, Ollama) and the CLI call.

Vectors come back L2-normalised (unit length, float32), one row per input, in input order,
with the number of tokens the model read (framing tokens included), for usage reporting.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidRequest
from .inputs import Input, input_sequences
from .service import Encoder
from .vectors import l2_normalize

__all__ = ["Embedded", "embed_inputs", "embed_texts", "embed_texts_sync", "require_embedder"]


@dataclass(frozen=True)
class Embedded:
    """`vectors`: float32 (n, dim), unit rows; `n_tokens`: tokens read for all inputs."""

    vectors: np.ndarray
    n_tokens: int


def require_embedder(encoder: Encoder) -> None:
    """InvalidRequest unless `encoder` gives sentence vectors (a reranker gives scores)."""
    if encoder.kind != "embed":
        raise InvalidRequest(
            f"the model {encoder.name} is a reranker (cross-encoder): it scores query/document "
            "pairs and gives no embeddings",
            param="model",
        )


def _prepare(
    encoder: Encoder, inputs: Sequence[Input], truncate: bool, param: str, indexed: bool
) -> list[list[int]]:
    require_embedder(encoder)
    return input_sequences(encoder, inputs, truncate, param, indexed=indexed)


async def embed_inputs(
    encoder: Encoder,
    inputs: Sequence[Input],
    truncate: bool,
    *,
    param: str = "input",
    indexed: bool = True,
) -> Embedded:
    """Embed texts and/or token arrays (ids of the encoder's vocabulary, framed with BOS/EOS
    when they lack them).  Errors name each input as ``param[i]`` (just `param` when
    `indexed` is False): ContextOverflow (400) for an input longer than the model takes unless
    `truncate`, InvalidRequest for a bad token array or a reranker.  Inputs of concurrent
    callers share decodes (see `Encoder`)."""
    # Tokenizing thousands of long texts takes a while: off the event loop.
    seqs = await asyncio.to_thread(_prepare, encoder, inputs, truncate, param, indexed)
    raw = await encoder.encode(seqs)
    return Embedded(l2_normalize(raw), sum(len(s) for s in seqs))


async def embed_texts(encoder: Encoder, texts: Sequence[str], truncate: bool) -> tuple[np.ndarray, int]:
    """(vectors, n_tokens) for `texts`: unit float32 rows in input order, and the tokens read.
    Raises ContextOverflow (HTTP 400, param ``input[i]``) for a text longer than the model takes
    unless `truncate` (then it is cut to the model's limit), InvalidRequest for a reranker."""
    got = await embed_inputs(encoder, texts, truncate)
    return got.vectors, got.n_tokens


def embed_texts_sync(encoder: Encoder, texts: Sequence[str], truncate: bool) -> tuple[np.ndarray, int]:
    """`embed_texts` for a thread that may block (the CLI); same contract."""
    seqs = _prepare(encoder, texts, truncate, "input", True)
    return l2_normalize(encoder.run(seqs)), sum(len(s) for s in seqs)

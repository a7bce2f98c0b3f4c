"""What the index needs from an embedding model: a name, a width and a way to embed texts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from ..embed import Encoder, embed_texts_sync

__all__ = ["Embedder", "EncoderEmbedder"]


class Embedder(Protocol):
    """Embeds texts into unit float32 vectors of `dim` floats, one row per text, in order.
    `name` is recorded in the index: an index is searched with the model that built it."""

    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


class EncoderEmbedder:
    """An `Embedder` over a loaded `Encoder` (kind "embed"); texts longer than the model takes
    are cut to fit (a passage is embedded by its beginning)."""

    def __init__(self, encoder: Encoder) -> None:
        self.encoder = encoder

    @property
    def name(self) -> str:
        return self.encoder.name

    @property
    def dim(self) -> int:
        return self.encoder.dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        vectors, _ = embed_texts_sync(self.encoder, list(texts), True)
        return vectors

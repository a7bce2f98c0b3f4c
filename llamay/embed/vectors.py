"""Vector arithmetic and formats: L2 normalisation, `dimensions` shortening, base64, the
similarity matrix and its text table."""

from __future__ import annotations

import base64
from collections.abc import Sequence

import numpy as np

__all__ = [
    "LABEL_WIDTH",
    "l2_normalize",
    "shorten",
    "to_base64",
    "from_base64",
    "similarity_matrix",
    "similarity_table",
    "label",
]

#: Row labels of the similarity table are cut to this many characters (ending in "…").
LABEL_WIDTH = 32


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Each row scaled to unit length (float32, a new array); an all-zero row stays zero."""
    v = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(v, axis=-1, keepdims=True)
    return (v / np.where(norms > 0, norms, 1.0)).astype(np.float32)


def shorten(vectors: np.ndarray, dimensions: int | None) -> np.ndarray:
    """The first `dimensions` components of each row, renormalised to unit length (what
    OpenAI's `dimensions` does); the rows unchanged when `dimensions` is None or the full size."""
    if dimensions is None or dimensions >= vectors.shape[-1]:
        return vectors
    return l2_normalize(vectors[..., :dimensions])


def to_base64(vector: np.ndarray) -> str:
    """One vector as base64 of its little-endian float32 bytes (OpenAI's base64 format)."""
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def from_base64(text: str) -> np.ndarray:
    """The inverse of `to_base64`."""
    return np.frombuffer(base64.b64decode(text), dtype="<f4").astype(np.float32)


def similarity_matrix(vectors: np.ndarray) -> np.ndarray:
    """Cosine similarity of every pair of rows (rows normalised first)."""
    v = l2_normalize(vectors)
    return np.asarray(v @ v.T, dtype=np.float64)


def label(text: str, width: int = LABEL_WIDTH) -> str:
    """`text` on one line (whitespace runs become one space), cut to `width` characters with
    a final "…" when longer."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def similarity_table(texts: Sequence[str], matrix: np.ndarray) -> str:
    """The matrix as an aligned table: a header of column numbers 0..n-1, then one row per text
    with its `label` padded to the widest label and the values as ``%6.3f``:

    ```
                                            0      1
    how do I fork a context             1.000  0.630
    context forking and copy-on-wri…    0.630  1.000
    ```
    Lines end without trailing spaces; the table ends with a newline."""
    labels = [label(t) for t in texts]
    width = max((len(s) for s in labels), default=0)
    header = " " * width + "   " + " ".join(f"{j:>6}" for j in range(len(labels)))
    lines = [header.rstrip()]
    for name, row in zip(labels, matrix, strict=True):
        lines.append(f"{name:<{width}}   " + " ".join(f"{float(x):6.3f}" for x in row))
    return "\n".join(lines) + "\n"

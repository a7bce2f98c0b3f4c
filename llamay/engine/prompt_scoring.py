"""Log-probabilities of a prompt's own tokens (OpenAI `echo` with `logprobs`).

A request with `prompt_logprobs` set gets logits for every prompt position: the row
decoded at position i - 1 scores prompt token i. Each row is reduced to a `PromptLogprob`
as soon as it is decoded, so only the small results are kept, never a vocabulary-sized row.
"""

from __future__ import annotations

import numpy as np

from ..types import PromptLogprob, TopLogprob

__all__ = ["score_row"]


def score_row(logits: np.ndarray, n_vocab: int, token: int, k: int, piece: list[bytes]) -> PromptLogprob:
    """The raw model's log-softmax of `token` under `logits` (no bias, penalties or mask),
    with the `k` most likely tokens, best first, ties to the lowest id. In float64: a
    sum of many float32 probabilities would lose the digits the callers compare."""
    row = np.asarray(logits[:n_vocab], dtype=np.float64)
    top = float(row.max())
    lse = top + float(np.log(np.exp(row - top).sum()))
    best: tuple[TopLogprob, ...] = ()
    want = min(k, n_vocab)
    if want > 0:
        sel = np.argpartition(-row, want - 1)[:want] if want < n_vocab else np.arange(n_vocab)
        sel = sel[np.lexsort((sel, -row[sel]))]  # by value descending, then id ascending
        best = tuple(TopLogprob(int(t), piece[int(t)], float(row[t]) - lse) for t in sel)
    return PromptLogprob(token, piece[token], float(row[token]) - lse, best)

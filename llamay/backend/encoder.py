"""An encoder context: a llama context with embeddings on, for pooled sentence vectors and
cross-encoder (rank) scores.

llama.cpp aborts the whole process on some inputs an encoder cannot run (a sequence longer
than the model's trained positions, a non-causal batch larger than one ubatch), so
`EncoderContext.encode` validates every batch before it reaches `llama_decode` and raises
ValueError instead.  Callers (the embed service) validate earlier still, per input, so those
ValueErrors are programming errors, not user errors.

Not thread-safe: one thread at a time may call `encode`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from .model import Model
from .native import llama_cpp

__all__ = ["EncoderConfig", "EncoderContext", "Pooling"]

Pooling = Literal["mean", "cls", "last", "rank"]

_POOLING: dict[int, Pooling] = {
    llama_cpp.LLAMA_POOLING_TYPE_MEAN: "mean",
    llama_cpp.LLAMA_POOLING_TYPE_CLS: "cls",
    llama_cpp.LLAMA_POOLING_TYPE_LAST: "last",
    llama_cpp.LLAMA_POOLING_TYPE_RANK: "rank",
}


@dataclass(frozen=True)
class EncoderConfig:
    """`max_tokens` caps the longest sequence (0: the model's trained context, at most 8192);
    one `llama_decode` call takes at most `max_seqs` sequences and `max_tokens` tokens in all."""

    max_tokens: int = 0
    max_seqs: int = 8
    n_threads: int = 2


class EncoderContext:
    """A llama context over `model` with `embeddings=True`, pooling as the GGUF says.

    `pooling` is "mean", "cls", "last" (sentence vectors of `width` = n_embd floats) or "rank"
    (a cross-encoder: `width` = the number of classifier outputs, usually 1, raw logits).
    `max_tokens` is the longest sequence accepted, and also the token budget of one decode.
    A model without pooling (pooling type NONE) is refused with ValueError: there is no
    sequence vector to read."""

    def __init__(self, model: Model, config: EncoderConfig) -> None:
        self.model = model
        n_train = model.info.n_ctx_train or 512
        limit = min(n_train, 8192)
        self.max_tokens = min(config.max_tokens, limit) if config.max_tokens > 0 else limit
        self.max_seqs = max(1, config.max_seqs)
        p = llama_cpp.llama_context_default_params()
        p.embeddings = True
        # A non-causal encoder must see each sequence whole in one ubatch: n_ubatch = n_batch.
        p.n_ctx = self.max_tokens
        p.n_batch = p.n_ubatch = self.max_tokens
        p.n_seq_max = self.max_seqs
        p.n_threads = p.n_threads_batch = max(1, config.n_threads)
        # A causal model (pooling LAST) does keep a KV cache: one shared by all its sequences.
        p.kv_unified = True
        p.no_perf = True
        ptr = llama_cpp.llama_init_from_model(model.ptr, p)
        if not ptr:
            raise RuntimeError("llama.cpp could not create an encoder context (out of memory?)")
        self._ptr = ptr
        try:
            pooling = _POOLING.get(int(llama_cpp.llama_pooling_type(ptr)))
            if pooling is None:
                raise ValueError(
                    f"{model.path}: the model has no pooling type (NONE), so it gives no sentence "
                    "vectors; convert it with a pooling type (mean, cls, last or rank)"
                )
            self.pooling: Pooling = pooling
            if pooling == "rank":
                self.width = int(llama_cpp.llama_model_n_cls_out(model.ptr))
            else:
                self.width = int(llama_cpp.llama_model_n_embd_out(model.ptr))
            self.n_seq_max = int(llama_cpp.llama_n_seq_max(ptr))
            self.n_ubatch = int(llama_cpp.llama_n_ubatch(ptr))
            # Encoder-only models (BERT) keep no KV memory; a causal one does and is cleared.
            self._mem = llama_cpp.llama_get_memory(ptr)
            self._batch = llama_cpp.llama_batch_init(self.max_tokens, 0, 1)
        except BaseException:
            llama_cpp.llama_free(ptr)
            raise
        self.max_seqs = min(self.max_seqs, self.n_seq_max)
        #: How a text is framed: BOS (BERT's [CLS]) first and EOS ([SEP]) last, when set.
        self.add_bos = model.add_bos
        self.add_eos = bool(llama_cpp.llama_vocab_get_add_eos(model.vocab))
        # Every token of a decode must fit the ubatch (non-causal) and the KV cache (causal).
        self.max_tokens = min(self.max_tokens, self.n_ubatch, int(llama_cpp.llama_n_ctx(ptr)))

    @property
    def ptr(self) -> int:
        if not self._ptr:
            raise RuntimeError("encoder context is closed")
        return self._ptr

    def close(self) -> None:
        """Free the context (the model stays open; its owner closes it)."""
        if self._ptr:
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self._ptr)
            self._ptr = None

    def __enter__(self) -> EncoderContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def check(self, seqs: Sequence[Sequence[int]]) -> None:
        """Raise ValueError unless `seqs` can go to llama.cpp in one decode: 1..max_seqs
        non-empty sequences of in-vocabulary ids, at most `max_tokens` tokens in all."""
        if not 1 <= len(seqs) <= self.max_seqs:
            raise ValueError(f"a decode takes 1 to {self.max_seqs} sequences, not {len(seqs)}")
        total = sum(len(s) for s in seqs)
        if total > self.max_tokens:
            raise ValueError(f"{total} tokens in one decode, more than the budget of {self.max_tokens}")
        n_vocab = self.model.n_vocab
        for s in seqs:
            if not s:
                raise ValueError("an empty sequence has no vector")
            if not all(0 <= t < n_vocab for t in s):
                raise ValueError(f"token id outside the vocabulary (0..{n_vocab - 1})")

    def encode(self, seqs: Sequence[Sequence[int]]) -> np.ndarray:
        """One decode over `seqs` (one llama sequence each); returns a float32 array of shape
        (len(seqs), width): pooled vectors as the model computes them (not normalised), or
        raw rank logits.  Raises ValueError for a batch `check` refuses, RuntimeError if
        llama.cpp fails the decode."""
        self.check(seqs)
        b = self._batch
        i = 0
        for seq, tokens in enumerate(seqs):
            for pos, token in enumerate(tokens):
                b.token[i] = token
                b.pos[i] = pos
                b.n_seq_id[i] = 1
                b.seq_id[i][0] = seq
                b.logits[i] = 1
                i += 1
        b.n_tokens = i
        ptr = self.ptr
        try:
            status = int(llama_cpp.llama_decode(ptr, b))
            if status != 0:
                raise RuntimeError(f"llama_decode failed with status {status}")
            out = np.empty((len(seqs), self.width), dtype=np.float32)
            for seq in range(len(seqs)):
                row = llama_cpp.llama_get_embeddings_seq(ptr, seq)
                if not row:
                    raise RuntimeError(f"llama.cpp returned no pooled output for sequence {seq}")
                out[seq] = np.ctypeslib.as_array(row, shape=(self.width,))
            return out
        finally:
            if self._mem:
                llama_cpp.llama_memory_clear(self._mem, True)

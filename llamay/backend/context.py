"""A llama context: many sequences over one unified KV cache, batched decode,
zero-copy logits, KV operations and per-sequence state bytes.

Not thread-safe: exactly one thread (the engine loop) may use a Context.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from .model import Model
from .native import llama_cpp

__all__ = ["Context", "ContextConfig", "Batch", "DecodeStatus"]


@dataclass(frozen=True)
class ContextConfig:
    n_ctx: int = 8192
    n_batch: int = 512
    n_seq_max: int = 16
    n_threads: int = 2
    n_threads_batch: int = 2
    type_kv: str = "f16"
    # Flash attention (the patched kernel in native/: two passes, f32 accumulation, the same
    # arithmetic for any batch) skips cells masked for a whole tile of query rows, so each
    # sequence's attention costs its own cells; without it every row reads every cell in use.
    flash_attn: bool = True


class DecodeStatus:
    OK = 0
    NO_KV_SLOT = 1
    ABORTED = 2


class Batch:
    """A preallocated llama_batch with room for `capacity` tokens, one sequence id each."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._raw = llama_cpp.llama_batch_init(capacity, 0, 1)
        self.n = 0

    def clear(self) -> None:
        self.n = 0

    def add(self, token: int, pos: int, seq: int, logits: bool) -> int:
        """Append one token; returns its index in the batch (for logits lookup)."""
        i = self.n
        if i >= self.capacity:
            raise OverflowError("batch is full")
        raw = self._raw
        raw.token[i] = token
        raw.pos[i] = pos
        raw.n_seq_id[i] = 1
        raw.seq_id[i][0] = seq
        raw.logits[i] = 1 if logits else 0
        self.n = i + 1
        return i

    @property
    def raw(self) -> llama_cpp.llama_batch:
        self._raw.n_tokens = self.n
        return self._raw

    def close(self) -> None:
        if self._raw is not None:
            llama_cpp.llama_batch_free(self._raw)
            self._raw = None  # type: ignore[assignment]


_KV_TYPES = {"f16": llama_cpp.GGML_TYPE_F16, "f32": llama_cpp.GGML_TYPE_F32, "q8_0": llama_cpp.GGML_TYPE_Q8_0}


class Context:
    """Owns a llama_context (unified KV, `n_seq_max` sequences) and its batch."""

    def __init__(self, model: Model, config: ContextConfig) -> None:
        self.model = model
        self.config = config
        p = llama_cpp.llama_context_default_params()
        p.n_ctx = config.n_ctx
        p.n_batch = config.n_batch
        p.n_ubatch = config.n_batch
        p.n_seq_max = config.n_seq_max
        # llama.cpp reserves an output row per sequence at creation and aborts the process
        # when that exceeds its default cap of n_batch outputs (a batch of 16 with 32
        # sequences); a step still never outputs more rows than it has tokens.
        p.n_outputs_max = max(config.n_batch, config.n_seq_max)
        p.n_threads = config.n_threads
        p.n_threads_batch = config.n_threads_batch
        p.kv_unified = True
        p.flash_attn_type = (
            llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
            if config.flash_attn
            else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
        p.no_perf = True
        p.type_k = p.type_v = _KV_TYPES[config.type_kv]
        ptr = llama_cpp.llama_init_from_model(model.ptr, p)
        if not ptr:
            raise RuntimeError("llama.cpp could not create a context (out of memory?)")
        self._ptr = ptr
        self.n_ctx = int(llama_cpp.llama_n_ctx(ptr))
        self.n_batch = int(llama_cpp.llama_n_batch(ptr))
        self.n_seq_max = int(llama_cpp.llama_n_seq_max(ptr))
        self.flash_attn = config.flash_attn
        self._mem = llama_cpp.llama_get_memory(ptr)
        self.batch = Batch(self.n_batch)

    @property
    def ptr(self) -> int:
        if not self._ptr:
            raise RuntimeError("context is closed")
        return self._ptr

    def close(self) -> None:
        self.batch.close()
        if self._ptr:
            llama_cpp.llama_free(self._ptr)
            self._ptr = None

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- compute ---------------------------------------------------------------------------
    def decode(self, batch: Batch | None = None) -> int:
        """Decode the batch; returns a DecodeStatus code (0 ok, 1 no KV slot, ...).
        On a non-zero status llama.cpp leaves the KV as it was before the call (status 1)."""
        b = batch or self.batch
        if b.n == 0:
            return DecodeStatus.OK
        return int(llama_cpp.llama_decode(self.ptr, b.raw))

    def logits(self, i: int) -> np.ndarray:
        """Zero-copy read-only view of the logits of batch row `i` (valid until the next decode)."""
        return self.model.logits_view(llama_cpp.llama_get_logits_ith(self.ptr, i))

    # -- KV operations ---------------------------------------------------------------------
    def seq_rm(self, seq: int, p0: int = -1, p1: int = -1) -> bool:
        """Remove positions [p0, p1) of `seq` (-1: open end). Whole sequences always succeed."""
        return bool(llama_cpp.llama_memory_seq_rm(self._mem, seq, p0, p1))

    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None:
        """Make `dst` share `src`'s cells in [p0, p1) (a tag, not a copy, with unified KV)."""
        llama_cpp.llama_memory_seq_cp(self._mem, src, dst, p0, p1)

    def seq_pos_max(self, seq: int) -> int:
        """Largest position held by `seq`, or -1 when empty."""
        return int(llama_cpp.llama_memory_seq_pos_max(self._mem, seq))

    def clear(self) -> None:
        llama_cpp.llama_memory_clear(self._mem, True)

    # -- state bytes -----------------------------------------------------------------------
    def seq_state(self, seq: int) -> bytes:
        size = int(llama_cpp.llama_state_seq_get_size(self.ptr, seq))
        buf = (ctypes.c_uint8 * size)()
        n = int(llama_cpp.llama_state_seq_get_data(self.ptr, buf, size, seq))
        return ctypes.string_at(buf, n)  # bytes(buf[:n]) builds a list of ints: 30x slower

    def set_seq_state(self, seq: int, data: bytes) -> bool:
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        return int(llama_cpp.llama_state_seq_set_data(self.ptr, buf, len(data), seq)) > 0

    def load_seq_state_file(self, seq: int, path: str) -> bool:
        """Load a state from a file in `llama_state_seq_load_file`'s format (kv.seqstate's
        StateFile) into `seq`: llama.cpp reads it a layer's rows at a time, so the state is
        never whole in memory. False when llama.cpp refuses it or finds no room."""
        tokens = (llama_cpp.llama_token * 1)()
        n_tokens = ctypes.c_size_t(0)
        done = llama_cpp.llama_state_seq_load_file(
            self.ptr, path.encode(), seq, tokens, 0, ctypes.byref(n_tokens)
        )
        return int(done) > 0

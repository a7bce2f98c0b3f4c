"""Quantise a GGUF model with llama.cpp's own quantiser (`llama_model_quantize`, the code behind
`llama-quantize`), from the libllama the engine loads.

Tests write a tiny F32 model (``write_tiny_llama``) and quantise it the ways people download
models (Q4_0, Q8_0, Q4_K_M, ...), so the engine's quantised kernels run on real quantised
files; the benchmarks do the same with full-size random-weight models. The mixes are llama.cpp's
(Q4_K_M keeps some tensors in Q6_K, most "Q4_0" files have a Q6_K output matrix, ...); K-quants
need rows whose length is a multiple of 256 (otherwise llama.cpp falls back to another type for
that tensor).
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

__all__ = ["QUANTS", "quantize_gguf"]

#: File types by the names llama-quantize and model downloads use (llama.h's llama_ftype).
QUANTS: dict[str, int] = {
    "F32": 0,
    "F16": 1,
    "Q4_0": 2,
    "Q4_1": 3,
    "Q8_0": 7,
    "Q2_K": 10,
    "Q3_K_M": 12,
    "Q4_K_S": 14,
    "Q4_K_M": 15,
    "Q5_K_S": 16,
    "Q5_K_M": 17,
    "Q6_K": 18,
}


def quantize_gguf(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    kind: str,
    *,
    threads: int = 2,
    pure: bool = False,
    requantize: bool = False,
) -> Path:
    """Write `src` (an F32 or F16 GGUF) quantised as `kind` (a key of QUANTS) to `dst`, with
    llama.cpp's own choice of type per tensor; `pure` quantises every matrix, the output one
    included, to the one type. `requantize` lets `src` be quantised itself (its weights are
    dequantised first: kind "F32" writes exactly the values a quantised file stands for).
    Returns `dst` as a Path; ValueError for an unknown kind, RuntimeError when llama.cpp
    fails."""
    from llamay.backend.native import ensure_backend, llama_cpp

    if kind not in QUANTS:
        raise ValueError(f"unknown quantisation {kind!r} (known: {', '.join(QUANTS)})")
    ensure_backend()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = QUANTS[kind]
    params.nthread = threads
    params.pure = pure
    params.allow_requantize = requantize
    out = Path(dst)
    status = llama_cpp.llama_model_quantize(str(src).encode(), str(out).encode(), ctypes.byref(params))
    if status != 0:
        raise RuntimeError(f"llama.cpp could not quantise {src} to {kind} (status {status})")
    return out

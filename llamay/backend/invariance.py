"""Which models llamay's batch invariance covers, and why another one's output may vary.

The promise (README, "Repeatable output"): a request's logits do not depend on what else the
server is doing. native/'s patches make llama.cpp's kernels keep it on x86-64 CPUs with AVX2
for weight matrices in F32, F16, Q4_0, Q4_1, Q8_0, Q4_K, Q5_K and Q6_K (the types of the F16,
Q4_0, Q4_1, Q8_0, Q4_K_S/M, Q5_K_S/M and Q6_K files people download), with an f16 or f32 KV
cache, for models with or without sliding-window attention (native/README.md). Anything else
is named here, so the server can say so (/api/show, the serve log, a response header): the
result is correct either way, only possibly not bit-identical from one batch to the next.

Pure functions over a GGUF's typed metadata and the ggml type ids of its weight matrices
(`store.gguf_header`), and the CPU; nothing here loads llama.cpp.
"""

from __future__ import annotations

import platform
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = ["COVERED_TYPES", "COVERED_KV", "batch_variance", "cpu_variance"]

# ggml type ids (ggml.h) of the weight types the patches cover, with their names.
COVERED_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 8: "Q8_0", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K"}
# The names of ggml types a GGUF may hold, for naming the others.
_TYPE_NAMES = {
    6: "Q5_0", 7: "Q5_1", 9: "Q8_1", 10: "Q2_K", 11: "Q3_K", 15: "Q8_K", 16: "IQ2_XXS", 17: "IQ2_XS",
    18: "IQ3_XXS", 19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS", 24: "I8",
    25: "I16", 26: "I32", 27: "I64", 28: "F64", 29: "IQ1_M", 30: "BF16", 34: "TQ1_0", 35: "TQ2_0",
    39: "MXFP4",
}  # fmt: skip
COVERED_KV = ("f16", "f32")


@lru_cache(maxsize=1)
def cpu_variance() -> tuple[str, ...]:
    """Why this machine's CPU is outside the promise (empty when it is x86-64 with AVX2)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return (f"a {platform.machine() or 'non-x86'} CPU (the kernels are checked on x86-64 with AVX2)",)
    cpuinfo = Path("/proc/cpuinfo")
    try:
        flags = cpuinfo.read_text(errors="replace") if cpuinfo.is_file() else ""
    except OSError:
        flags = ""
    if flags and " avx2" not in flags:
        return ("a CPU without AVX2 (the kernels are checked with AVX2)",)
    return ()


def batch_variance(
    meta: Mapping[str, Any], weight_types: Iterable[int], kv_type: str = "f16"
) -> tuple[str, ...]:
    """Why a model's output may vary with what shares its batch and KV cache: one short reason
    each, empty when it is inside the promise. `meta` is the GGUF's typed metadata,
    `weight_types` the ggml types of its weight matrices, `kv_type` the server's KV cache type."""
    reasons = list(cpu_variance())
    others = sorted(set(weight_types) - set(COVERED_TYPES))
    if others:
        names = ", ".join(_TYPE_NAMES.get(t, f"type {t}") for t in others)
        reasons.append(f"{names} weights (not checked)")
    if kv_type not in COVERED_KV:
        reasons.append(f"a {kv_type} KV cache")
    arch = str(meta.get("general.architecture", ""))
    if _positive(meta.get(f"{arch}.expert_count")):
        reasons.append("mixture-of-experts layers (not checked)")
    if arch.startswith("rwkv") or any(key.startswith(f"{arch}.ssm.") for key in meta):
        reasons.append("recurrent layers (not checked)")
    return tuple(reasons)


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0

"""The machine's memory read bandwidth, the bound on decoding speed: a decoded token reads every
weight once, so no engine decodes faster than bandwidth / bytes of weights per token.

Measured as numpy streams through a buffer far larger than any cache (a maximum over uint64
words, which numpy computes with SIMD and with the GIL released), one slice per thread, the
best of a few passes."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

__all__ = ["read_bandwidth"]


def read_bandwidth(threads: int = 2, mib: int = 1024, passes: int = 5) -> dict[str, Any]:
    """Read GB/s over a `mib` MiB buffer with `threads` threads, best of `passes`."""
    words = mib * (1 << 20) // 8
    buf = np.ones(words, dtype=np.uint64)  # written once, so every page is backed
    slices = np.array_split(buf, threads)
    best = 0.0
    for _ in range(passes):
        workers = [threading.Thread(target=np.maximum.reduce, args=(part,)) for part in slices]
        start = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        best = max(best, buf.nbytes / (time.perf_counter() - start) / 1e9)
    del buf, slices
    return {"read_gb_s": best, "threads": threads, "buffer_mib": mib, "passes": passes, "method": "numpy"}

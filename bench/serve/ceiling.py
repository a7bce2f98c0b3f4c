"""What llama.cpp itself does on this machine: batched decode with no server and no sampling.

    .venv/bin/python -m bench.serve.ceiling MODEL [--threads N] [--tokens N]

Loads the model through llamay's backend (the same context settings as `llamay serve`),
computes an 8-token prompt in each of 1 and then 8 sequences, and times `--tokens` decode
steps of one token per sequence. Prints JSON: tok/s for 1 and 8 sequences and their ratio,
the ceiling for "aggregate decode at concurrency 8 over single-stream decode" on this
machine and model.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from llamay.backend.context import Context, ContextConfig
from llamay.backend.model import Model
from llamay.runtime import default_threads


def decode_rate(ctx: Context, n_seq: int, steps: int) -> float:
    """Tokens per second over `steps` steps, each one token for each of `n_seq` sequences."""
    ctx.clear()
    batch = ctx.batch
    for s in range(n_seq):
        batch.clear()
        for p in range(8):
            batch.add(1000 + 37 * s + p, p, s, p == 7)
        ctx.decode()
    start = time.perf_counter()
    for k in range(steps):
        batch.clear()
        for s in range(n_seq):
            batch.add(2000 + k, 8 + k, s, True)
        if ctx.decode() != 0:
            raise RuntimeError("llama_decode failed")
    return n_seq * steps / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--ctx", type=int, default=8192)
    args = ap.parse_args()
    threads = args.threads or default_threads()
    model = Model(args.model)
    config = ContextConfig(n_ctx=args.ctx, n_batch=512, n_seq_max=32, n_threads=threads, n_threads_batch=threads)
    with Context(model, config) as ctx:
        decode_rate(ctx, 1, 8)  # warm up
        one = max(decode_rate(ctx, 1, args.tokens) for _ in range(2))
        eight = max(decode_rate(ctx, 8, args.tokens) for _ in range(2))
    model.close()
    print(json.dumps({"decode_1_tok_s": one, "decode_8_tok_s": eight, "ratio_8_over_1": eight / one}))


if __name__ == "__main__":
    main()

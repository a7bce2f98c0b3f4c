"""Checks that a model's logits do not depend on what else the engine is doing, for the tests of
every quantisation (test_quant_invariance.py) and of sliding-window attention
(test_swa_invariance.py). Each compares logits bitwise, at every position: in a small model a
difference in an early position's keys and values need not reach the last position.

The batches reach past the column counts at which llama.cpp switches matrix kernels (4 for
its repacked layouts, 8 for the tiled K-quant kernel): ten sequences decode together.
"""

from __future__ import annotations

import numpy as np

from llamay.backend.context import Context, ContextConfig
from llamay.backend.model import Model

PROMPT = [5 + (7 * i) % 50 for i in range(21)]
OTHERS = {seq: [9 + (seq * 5 + 3 * i) % 40 for i in range(4 + 3 * seq)] for seq in range(1, 10)}
STEPS = 12
CONFIG = ContextConfig(n_ctx=1024, n_batch=256, n_seq_max=12, n_threads=2, n_threads_batch=2)
PAD = 11  # a sequence id no other list here uses


def read(
    model: Model, tokens: list[int], step: int, keep: int = 0, config: ContextConfig = CONFIG
) -> list[np.ndarray]:
    """The logits of every position from `keep` on, reading `tokens` `step` at a time into one
    sequence."""
    rows: list[np.ndarray] = []
    with Context(model, config) as ctx:
        for start in range(0, len(tokens), step):
            b = ctx.batch
            b.clear()
            positions = range(start, min(start + step, len(tokens)))
            out = [b.add(tokens[p], p, 0, p >= keep) for p in positions]
            assert ctx.decode() == 0
            rows += [ctx.logits(i).copy() for i, p in zip(out, positions, strict=True) if p >= keep]
    return rows


def prefill(
    ctx: Context, prompts: dict[int, list[int]], start: dict[int, int] | None = None
) -> tuple[dict[int, int], list[np.ndarray]]:
    """Read every sequence's prompt (from position `start[seq]`, default 0) in one batch, with
    logits at every position: each sequence's greedy next token, and sequence 0's logits."""
    b = ctx.batch
    b.clear()
    rows: dict[int, list[int]] = {}
    for seq, tokens in prompts.items():
        first = (start or {}).get(seq, 0)
        rows[seq] = [b.add(tokens[p], p, seq, True) for p in range(first, len(tokens))]
    assert ctx.decode() == 0
    seq0 = [ctx.logits(i).copy() for i in rows.get(0, [])]
    return {seq: int(np.argmax(ctx.logits(r[-1]))) for seq, r in rows.items()}, seq0


def decode(
    ctx: Context, last: dict[int, int], pos: dict[int, int], steps: int, watch: int
) -> list[np.ndarray]:
    """`steps` greedy steps of every sequence in `last` (updated in place with `pos`), one
    batch per step; sequence `watch`'s logits at each step."""
    trace = []
    b = ctx.batch
    for _ in range(steps):
        b.clear()
        rows = {seq: b.add(tok, pos[seq], seq, True) for seq, tok in last.items()}
        assert ctx.decode() == 0
        for seq, row in rows.items():
            pos[seq] += 1
            last[seq] = int(np.argmax(ctx.logits(row)))
        trace.append(ctx.logits(rows[watch]).copy())
    return trace


def run(
    model: Model, others: dict[int, list[int]], share: int = 0, steps: int = STEPS
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Sequence 0's logits at each prompt position and at `steps` greedy steps, its prompt read
    in the same batch as `others`' prompts and decoding beside them. `share` > 0: its first
    `share` positions are another sequence's cells (a prefix-cache hit)."""
    with Context(model, CONFIG) as ctx:
        if share:
            prefill(ctx, {PAD: PROMPT[:share] + [17, 19, 23]})
            ctx.seq_cp(PAD, 0, 0, share)
        prompts = {0: PROMPT, **others}
        last, rows = prefill(ctx, prompts, {0: share})
        trace = decode(ctx, last, {seq: len(t) for seq, t in prompts.items()}, steps, 0)
    return rows, trace


def differing(a: list[np.ndarray], b: list[np.ndarray]) -> list[int]:
    """The indices at which two lists of logit rows are not bitwise equal."""
    return [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if not np.array_equal(x, y)]


def check_read(
    model: Model,
    length: int = 45,
    keep: int = 0,
    splits: tuple[int, ...] = (9, 5, 4, 2),
    config: ContextConfig = CONFIG,
) -> None:
    """A prompt read at once, in `splits` and token by token: the same logits at every position
    (from `keep` on)."""
    tokens = [5 + (11 * i) % 60 for i in range(length)]
    one_by_one = read(model, tokens, 1, keep, config)
    for step in (min(length, config.n_batch), *splits):
        assert differing(read(model, tokens, step, keep, config), one_by_one) == [], f"{step} tokens per batch"


def check_batched(model: Model) -> None:
    """A sequence alone and among nine others (prompts in one batch, decoding together)."""
    rows, trace = run(model, {})
    rows_batched, trace_batched = run(model, OTHERS)
    assert differing(rows, rows_batched) == [], "prompt positions differ"
    assert differing(trace, trace_batched) == [], "decoding steps differ"


def check_prefix_hit(model: Model) -> None:
    """The positions after a 13-position prefix shared from another sequence (ending mid-page),
    among nine others, against a cold run alone."""
    rows, trace = run(model, {})
    rows_hit, trace_hit = run(model, OTHERS, share=13)
    assert differing(rows[13:], rows_hit) == [], "prompt positions after the hit differ"
    assert differing(trace, trace_hit) == [], "decoding steps differ"


def check_restore(model: Model, cut: int = 5) -> None:
    """A sequence snapshotted mid-decode and restored into another context (after other cells,
    as another sequence id) goes on among others with the logits it would have had."""
    _, trace = run(model, {})
    with Context(model, CONFIG) as ctx:
        last, _ = prefill(ctx, {0: PROMPT})
        pos = {0: len(PROMPT)}
        decode(ctx, last, pos, cut, 0)
        state, token, at = ctx.seq_state(0), last[0], pos[0]
    with Context(model, CONFIG) as ctx:
        prefill(ctx, {PAD: [3] * 37})  # cells in use before the restored ones
        assert ctx.set_seq_state(4, state)
        others = {seq: t for seq, t in OTHERS.items() if seq != 4}
        last, _ = prefill(ctx, others)
        pos = {seq: len(t) for seq, t in others.items()}
        last[4], pos[4] = token, at
        rest = decode(ctx, last, pos, STEPS - cut, 4)
    assert differing(trace[cut:], rest) == [], "decoding steps after the restore differ"

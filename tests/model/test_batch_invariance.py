"""A sequence's logits do not depend on what else shares the batch and the KV cache.

This is what the llama.cpp patch in native/ provides (aligned KV cells, one attention kernel
for one query and for many, a softmax sum that does not depend on how cells group into
blocks); the comparison is bitwise, so the unpatched build fails it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from llamay.backend.context import Context, ContextConfig
from llamay.backend.model import Model

PROMPT = [5 + (7 * i) % 50 for i in range(21)]
OTHERS = {1: [9 + (5 * i) % 40 for i in range(7)], 2: [11 + (3 * i) % 30 for i in range(30)]}
STEPS = 40


@pytest.fixture(scope="module")
def model(tiny_model_path: Path) -> Iterator[Model]:
    m = Model(tiny_model_path)
    yield m
    m.close()


def fill(ctx: Context, seq: int, tokens: list[int], start: int = 0) -> int:
    """Compute positions [start, len(tokens)) of `seq` in one batch; returns the batch row of
    the last one (the only one with logits)."""
    b = ctx.batch
    b.clear()
    for p in range(start, len(tokens)):
        b.add(tokens[p], p, seq, p == len(tokens) - 1)
    assert ctx.decode() == 0
    return b.n - 1


def run(
    model: Model, *, pad: int, others: dict[int, list[int]], share: int = 0, flash_attn: bool = True
) -> list[np.ndarray]:
    """Sequence 0's logits for its prompt and STEPS greedy steps, after `pad` cells of
    another sequence, with `others` decoding greedily in the same batches. `share` > 0: the
    first `share` prompt positions come from another sequence's cells (a prefix-cache hit),
    whose own tokens go on past them, so sequence 0 continues in cells of its own."""
    config = ContextConfig(
        n_ctx=1024, n_batch=256, n_seq_max=8, n_threads=2, n_threads_batch=2, flash_attn=flash_attn
    )
    with Context(model, config) as ctx:
        for start in range(0, pad, 200):  # in batches the context can take
            fill(ctx, 7, [3] * min(pad, start + 200), start)
        if share:
            fill(ctx, 6, PROMPT[:share] + [17, 19, 23, 29])
            ctx.seq_cp(6, 0, 0, share)
        prompts = {**others, 0: PROMPT}
        last: dict[int, int] = {}
        trace: list[np.ndarray] = []
        for seq, tokens in prompts.items():
            row = fill(ctx, seq, tokens, share if seq == 0 else 0)
            last[seq] = int(np.argmax(ctx.logits(row)))
            if seq == 0:
                trace.append(ctx.logits(row).copy())
        pos = {seq: len(tokens) for seq, tokens in prompts.items()}
        b = ctx.batch
        for _ in range(STEPS):
            b.clear()
            rows = {seq: b.add(last[seq], pos[seq], seq, True) for seq in prompts}
            assert ctx.decode() == 0
            for seq, row in rows.items():
                pos[seq] += 1
                last[seq] = int(np.argmax(ctx.logits(row)))
            trace.append(ctx.logits(rows[0]).copy())
    return trace


def assert_batch_invariant(model: Model, flash_attn: bool) -> None:
    alone = run(model, pad=0, others={}, flash_attn=flash_attn)
    cases = (
        ("batched with two others after 5 cells", dict(pad=5, others=OTHERS)),
        ("after 37 cells", dict(pad=37, others={})),
        # From 512 cells on, llama.cpp's own flash attention splits a lone query's cells
        # between threads (here: at cell 256, inside sequence 0's), which sums otherwise.
        ("after 240 cells", dict(pad=240, others={})),
        (
            "13 prompt positions shared from another sequence, batched with two others",
            dict(pad=3, others=OTHERS, share=13),
        ),
    )
    for name, kwargs in cases:
        trace = run(model, flash_attn=flash_attn, **kwargs)  # type: ignore[arg-type]
        differing = [i for i, (a, b) in enumerate(zip(alone, trace, strict=True)) if not np.array_equal(a, b)]
        assert differing == [], f"{name}: logits differ at steps {differing[:5]}"


def read(model: Model, tokens: list[int], step: int) -> np.ndarray:
    """The last position's logits after reading `tokens` `step` at a time."""
    config = ContextConfig(n_ctx=256, n_batch=64, n_seq_max=1, n_threads=2, n_threads_batch=2)
    with Context(model, config) as ctx:
        for start in range(0, len(tokens), step):
            row = fill(ctx, 0, tokens[: start + step], start)
        return ctx.logits(row).copy()


def assert_read_at_once_as_one_by_one(model: Model) -> None:
    """A prompt read in one batch (many columns per weight product: the quantized kernels
    that take several columns a call) ends on the logits of reading it token by token (one
    column: the one-pair kernels), and so does every split in between."""
    tokens = [5 + (11 * i) % 60 for i in range(45)]
    one_by_one = read(model, tokens, 1)
    for step in (45, 9, 5, 4):
        assert np.array_equal(read(model, tokens, step), one_by_one), f"{step} tokens per batch"


def test_a_prompt_read_at_once_gives_the_logits_of_reading_it_token_by_token(model: Model) -> None:
    assert_read_at_once_as_one_by_one(model)


@pytest.mark.parametrize("flash_attn", [True, False], ids=["flash-attn", "plain"])
def test_logits_are_bitwise_the_same_alone_and_batched(model: Model, flash_attn: bool) -> None:
    assert_batch_invariant(model, flash_attn)


@pytest.mark.slow
def test_the_same_on_the_default_model() -> None:
    """The tiny model's random weights give attention scores whose sums rarely round; the
    default model's do, so the same cases run on it (seconds, once it is fetched)."""
    from llamay.store import ModelStore

    m = Model(ModelStore().resolve(None).path)
    try:
        assert_batch_invariant(m, flash_attn=True)
        assert_batch_invariant(m, flash_attn=False)
        assert_read_at_once_as_one_by_one(m)  # its weights are Q4_1
    finally:
        m.close()

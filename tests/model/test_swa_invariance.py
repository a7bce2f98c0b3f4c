"""Sliding-window attention (Gemma 2 and 3, and other models llama.cpp runs with two KV caches,
one for the layers that see only the last positions) inside the promise: a request's logits do
not depend on what else shares the batch and the cache.

llamay runs llama.cpp with a full-size cache for the sliding-window layers (its default), and
native/'s 0010 places that cache's cells in aligned pages as the other cache's are placed
(0001): a sequence's attention then sums over its cells in the same order wherever they sit. The
tiny model's window is 16 positions, so every check here reaches past it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from llamay.backend.context import Context, ContextConfig
from llamay.backend.model import Model
from llamay.testing.tiny_swa import write_tiny_gemma3

from .invariance import (
    CONFIG,
    OTHERS,
    PAD,
    PROMPT,
    check_batched,
    check_prefix_hit,
    check_read,
    check_restore,
    decode,
    differing,
    prefill,
)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Model]:
    m = Model(write_tiny_gemma3(tmp_path_factory.mktemp("swa") / "tiny-gemma3.gguf"))
    assert m.info.metadata["gemma3.attention.sliding_window"] == "16"
    yield m
    m.close()


def after_freed_cells(
    model: Model, steps: int, pad: int, config: ContextConfig = CONFIG
) -> tuple[list, list]:
    """Sequence 0's prompt and `steps` decoding steps: alone, and with `pad` cells of another
    sequence below its own that are freed before it decodes (so free cells lie below it, where
    llama.cpp's own search would put its next tokens, out of position order). `config` must hold
    `pad` tokens in one batch and both sequences' cells."""
    with Context(model, config) as ctx:
        last, rows = prefill(ctx, {0: PROMPT})
        alone = rows + decode(ctx, last, {0: len(PROMPT)}, steps, 0)
    with Context(model, config) as ctx:
        prefill(ctx, {PAD: [3] * pad})
        last, rows = prefill(ctx, {0: PROMPT, 6: OTHERS[6]})
        assert ctx.seq_rm(PAD)
        busy = rows + decode(ctx, last, {0: len(PROMPT), 6: len(OTHERS[6])}, steps, 0)
    return alone, busy


def test_a_prompt_read_at_once_in_splits_and_token_by_token_gives_the_same_logits(model: Model) -> None:
    check_read(model)


def test_a_sequence_alone_and_among_nine_others_gives_the_same_logits(model: Model) -> None:
    check_batched(model)


def test_a_prefix_cache_hit_gives_the_logits_of_a_cold_run(model: Model) -> None:
    check_prefix_hit(model)


def test_a_restored_sequence_continues_with_the_logits_it_would_have_had(model: Model) -> None:
    check_restore(model)


def test_cells_freed_below_a_sequence_change_nothing(model: Model) -> None:
    alone, busy = after_freed_cells(model, steps=40, pad=100)
    assert differing(alone, busy) == [], "positions differ"


@pytest.mark.slow
@pytest.mark.timeout(1800)  # some 2,800 decodes of a 270M model
def test_the_same_on_gemma3() -> None:
    """Gemma 3 270M (Q4_K_M, a 512-position window): the same checks, a prompt reaching past the
    window, and decoding past it after cells below the sequence were freed."""
    from llamay.store import ModelStore

    m = Model(ModelStore().resolve("gemma3:270m").path)
    try:
        check_batched(m)
        check_prefix_hit(m)
        check_restore(m)
        check_read(m, length=560, keep=500, splits=(7,))  # three reads of 560 tokens, not six
        # 300 padding cells in one batch, then two sequences decoding 500 steps each
        big = replace(CONFIG, n_ctx=4096, n_batch=512)
        alone, busy = after_freed_cells(m, steps=500, pad=300, config=big)
        assert differing(alone, busy) == [], "positions differ"
    finally:
        m.close()

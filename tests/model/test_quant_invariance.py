"""Bitwise batch invariance on the quantisations people download: Q4_0, Q4_1, Q8_0, Q4_K_M,
Q5_K_M and Q6_K files (so Q4_0, Q4_1, Q8_0, Q4_K, Q5_K and Q6_K weights), quantised by
llama.cpp's own quantiser.

llama.cpp multiplies a weight matrix by one column (a decoding token) and by many (a prompt,
several sequences decoding together) with different kernels: repacked (interleaved) layouts
with their own one- and many-column kernels for Q4_0, Q4_1, Q4_K, Q5_K, Q6_K and Q8_0 (Q6_K with
VNNI), a tiled kernel for K-quants from 8 columns on, llamafile's sgemm for Q4_0 and Q8_0 from 2
(matrices whose row count is not a multiple of 8, like the tiny vocabulary's output matrix),
0005's kernel for Q4_1 there. native/ makes each of them
compute a column with exactly the operations, in the same order, that the others use. The
model is tiny but its rows span several quantisation blocks (512 and 768 wide: two and three
256-wide K-quant superblocks), and each file is checked to hold the weight types it is named
for, so the kernels under test are the ones that run.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import gguf
import pytest

from llamay.backend.model import Model
from llamay.testing import quantize_gguf

from .invariance import CONFIG, check_batched, check_prefix_hit, check_read, check_restore

# The matrix types each file must hold. llama.cpp's mixes keep the output matrix in Q6_K in most
# files; "Q4_0-pure" has it in Q4_0 too, with the tiny vocabulary's 559 rows, which no repacked
# layout takes (they need a multiple of 8), so it goes through llamafile's sgemm and vec_dot.
QUANTS = {
    "Q4_0": {"Q4_0", "Q6_K"},
    "Q4_0-pure": {"Q4_0"},
    "Q4_1": {"Q4_1", "Q6_K"},
    "Q8_0": {"Q8_0"},
    "Q4_K_M": {"Q4_K", "Q6_K"},
    "Q5_K_M": {"Q5_K", "Q6_K"},
    "Q6_K": {"Q6_K"},
}


@pytest.fixture(scope="module", params=list(QUANTS))
def model(
    request: pytest.FixtureRequest, quant_source_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Model]:
    name: str = request.param
    kind, _, variant = name.partition("-")
    out = tmp_path_factory.mktemp("quant") / f"tiny-{name}.gguf"
    path = quantize_gguf(quant_source_path, out, kind, pure=variant == "pure")
    found = {t.tensor_type.name for t in gguf.GGUFReader(path).tensors if len(t.shape) > 1}
    assert found == QUANTS[name], f"{name}: llama.cpp wrote {sorted(found)}"
    m = Model(path)
    yield m
    m.close()


def test_a_prompt_read_at_once_in_splits_and_token_by_token_gives_the_same_logits(model: Model) -> None:
    check_read(model)


def test_rows_split_unevenly_between_threads_give_the_same_logits(model: Model) -> None:
    """Three threads split the 512- and 256-row matrices into chunks of an odd number of 8-row
    groups (40 rows, 24 rows), where the repacked many-column kernels that take two groups at
    a time (native/0022, AVX-512 VNNI machines) finish with one group the 256-bit way: still
    the logits of reading token by token."""
    check_read(model, config=replace(CONFIG, n_threads=3, n_threads_batch=3))


def test_a_sequence_alone_and_among_nine_others_gives_the_same_logits(model: Model) -> None:
    check_batched(model)


def test_a_prefix_cache_hit_gives_the_logits_of_a_cold_run(model: Model) -> None:
    check_prefix_hit(model)


def test_a_restored_sequence_continues_with_the_logits_it_would_have_had(model: Model) -> None:
    check_restore(model)


def test_speculation_changes_no_token(model: Model) -> None:
    """Speculative decoding rests on this invariance: a position's logits are the same in a
    step of its own and among drafted positions, so on every quantisation the tokens and
    log-probabilities are those of decoding without it, guesses taken or refused."""
    from .test_speculate import request, together_matches_alone_without_speculation

    # This model's logits are steep: a strong bias narrows it to four tokens, a high
    # temperature makes its draws among them vary.
    few = tuple((t, 300.0) for t in (40, 41, 42, 43))
    reqs = [
        request(model, "The little dog", n=48, temperature=3.0, seed=s, logprobs=True, logit_bias=few)
        for s in (1, 2, 3)
    ]
    reqs.append(request(model, "A cat sat", n=48, logprobs=True, logit_bias=few))
    together_matches_alone_without_speculation(model, reqs)

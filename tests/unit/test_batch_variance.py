"""backend.invariance: which models are inside the batch-invariance promise, and the reasons
given for the others; the GGUF header's weight types it reads; the response header's value."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from llamay.api.variance import header_value
from llamay.backend import invariance
from llamay.backend.invariance import COVERED_TYPES, batch_variance
from llamay.store.gguf_header import read_header

LLAMA = {"general.architecture": "llama"}


@pytest.fixture(autouse=True)
def x86_with_avx2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(invariance, "cpu_variance", lambda: ())


def test_the_covered_weight_types_and_kv_caches_give_no_reason() -> None:
    assert batch_variance(LLAMA, COVERED_TYPES) == ()
    assert batch_variance(LLAMA, {14, 12}, "f32") == ()  # a Q4_K_M file, an f32 cache


def test_each_other_weight_type_is_named() -> None:
    assert batch_variance(LLAMA, {12, 11, 23}) == ("Q3_K, IQ4_XS weights (not checked)",)
    assert batch_variance(LLAMA, {99}) == ("type 99 weights (not checked)",)


def test_a_quantised_kv_cache_experts_and_recurrent_layers_are_named() -> None:
    assert batch_variance(LLAMA, {8}, "q8_0") == ("a q8_0 KV cache",)
    moe = {"general.architecture": "qwen3moe", "qwen3moe.expert_count": 128}
    assert batch_variance(moe, {12}) == ("mixture-of-experts layers (not checked)",)
    assert batch_variance({**moe, "qwen3moe.expert_count": 0}, {12}) == ()
    mamba = {"general.architecture": "mamba", "mamba.ssm.state_size": 16}
    assert batch_variance(mamba, {8}) == ("recurrent layers (not checked)",)
    assert batch_variance({"general.architecture": "rwkv7"}, {8}) == ("recurrent layers (not checked)",)


def test_sliding_window_attention_is_inside() -> None:
    gemma = {"general.architecture": "gemma3", "gemma3.attention.sliding_window": 512}
    assert batch_variance(gemma, {12, 14}) == ()


def test_a_cpu_other_than_x86_with_avx2_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()  # the real cpu_variance, on a pretended machine
    monkeypatch.setattr(invariance.platform, "machine", lambda: "arm64")
    invariance.cpu_variance.cache_clear()
    try:
        assert batch_variance(LLAMA, {8})[0].startswith("a arm64 CPU")
    finally:
        invariance.cpu_variance.cache_clear()


def test_the_header_reader_lists_the_types_of_matrices_only(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(path, "llama")
    w.add_tensor("a.weight", np.zeros((4, 32), dtype=np.float16))
    w.add_tensor("b.weight", np.zeros((2, 8, 32), dtype=np.float32))
    w.add_tensor("norm.weight", np.zeros(32, dtype=np.int32))  # a vector: not a weight matrix
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert read_header(path).weight_types == {0, 1}


class _Loaded:
    def __init__(self, *reasons: str) -> None:
        self.batch_variance = reasons


def test_the_header_value() -> None:
    assert header_value([]) is None
    assert header_value([_Loaded()]) == b"yes"
    both = [_Loaded("Q3_K weights (not checked)"), _Loaded("Q3_K weights (not checked)", "a q8_0 KV cache")]
    assert header_value(both) == b"no; Q3_K weights (not checked); a q8_0 KV cache"

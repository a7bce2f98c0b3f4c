"""Fixtures of the model tier: tiny generated GGUF models that the real llama.cpp engine runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from llamay.testing import write_tiny_llama, write_tiny_think_llama


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny ChatML "llama" model (``write_tiny_llama`` defaults), written once per test session."""
    return write_tiny_llama(tmp_path_factory.mktemp("tiny-model") / "tiny-llama.gguf")


@pytest.fixture(scope="session")
def tiny_think_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reasoning variant (``<think>`` tokens, ``CHATML_THINK``), written once per test session."""
    return write_tiny_think_llama(tmp_path_factory.mktemp("tiny-think-model") / "tiny-think-llama.gguf")


@pytest.fixture(scope="session")
def quant_source_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The F32 tiny model the quantisation tests quantise: rows 512 and 768 wide (two and three
    256-wide K-quant superblocks, multiples of 8 for the repacked layouts), written once per
    test session."""
    path = tmp_path_factory.mktemp("quant-f32") / "tiny-f32.gguf"
    return write_tiny_llama(path, n_embd=512, n_ff=768, n_layer=2, n_head=8, n_head_kv=4)

"""Weights are read into memory when they fit comfortably (huge pages decode faster), and
mapped from the file when they do not."""

from __future__ import annotations

from pathlib import Path

import pytest

import llamay.backend.model as model_mod
from llamay.backend.model import Model, read_into_memory
from llamay.testing import write_tiny_llama


def mapped(path: Path) -> bool:
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
        return any(line.rstrip().endswith(str(path)) for line in f)


def test_weights_up_to_half_the_available_memory_are_read() -> None:
    assert read_into_memory(500, available=1000)
    assert not read_into_memory(501, available=1000)


def test_weights_are_mapped_when_the_available_memory_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model_mod, "mem_available", lambda: None)
    assert not read_into_memory(1)


def test_a_small_model_is_read_and_a_big_one_mapped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_tiny_llama(tmp_path / "tiny.gguf")
    with Model(path) as m:
        assert m.n_vocab > 0
        assert not mapped(path)
    monkeypatch.setattr(model_mod, "mem_available", lambda: 1024)
    with Model(path) as m:
        assert m.n_vocab > 0
        assert mapped(path)

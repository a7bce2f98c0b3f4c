"""Weights are read into memory when they fit comfortably (huge pages decode faster), and
mapped from the file when they do not: the decision, without loading anything (the loads
themselves are checked in tests/model/test_model_load.py)."""

from __future__ import annotations

import pytest

import llamay.backend.memory as memory_mod
from llamay.backend.memory import read_into_memory


def test_weights_up_to_half_the_available_memory_are_read() -> None:
    assert read_into_memory(500, available=1000)
    assert not read_into_memory(501, available=1000)


def test_weights_are_mapped_when_the_available_memory_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory_mod, "mem_available", lambda: None)
    assert not read_into_memory(1)

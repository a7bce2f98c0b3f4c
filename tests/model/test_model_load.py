"""Loading weights in llama.cpp: read into memory when they fit comfortably (huge pages
decode faster), mapped from the file when they do not; a progress function that says no
stops the load."""

from __future__ import annotations

from pathlib import Path

import pytest

import llamay.backend.memory as memory_mod
from llamay.backend.model import Model
from llamay.testing import write_tiny_llama


def mapped(path: Path) -> bool:
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
        return any(line.rstrip().endswith(str(path)) for line in f)


def test_a_small_model_is_read_and_a_big_one_mapped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_tiny_llama(tmp_path / "tiny.gguf")
    with Model(path) as m:
        assert m.n_vocab > 0
        assert not mapped(path)
    monkeypatch.setattr(memory_mod, "mem_available", lambda: 1024)
    with Model(path) as m:
        assert m.n_vocab > 0
        assert mapped(path)


def test_a_progress_function_that_says_no_stops_llama_cpp(tmp_path: Path) -> None:
    path = write_tiny_llama(tmp_path / "m.gguf")
    with pytest.raises(ValueError, match="could not load"):
        Model(path, progress=lambda f: False)
    fractions: list[float] = []
    with Model(path, progress=fractions.append):  # None is not a no
        pass
    assert fractions and fractions[-1] == 1.0

"""The unit tier runs on a machine that has not built the engine: while a unit test runs,
`llama_cpp` cannot be imported (unless another tier of the same session already loaded it),
so a unit test that reaches the engine fails here, not only on such a machine. What the
tier's modules import is checked by test_unit_tier.py."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _no_engine(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if "llama_cpp" not in sys.modules:
        monkeypatch.setitem(sys.modules, "llama_cpp", None)  # `import llama_cpp` raises ImportError
    yield

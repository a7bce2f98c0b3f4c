"""The installed llama_cpp is the build of native/'s whole series (libllama exports the level
llamay expects), and the engine checks the library llama_cpp loaded before it initialises it."""

from __future__ import annotations

from pathlib import Path

import llama_cpp.llama_cpp
import pytest

from llamay.backend import native
from llamay.backend.patchlevel import PATCH_LEVEL, UnpatchedEngine, check_patch_level, patch_level
from tests.unit.test_native_series import _stub


def test_the_installed_engine_exports_the_series_level() -> None:
    lib = llama_cpp.llama_cpp._lib
    assert patch_level(lib) == PATCH_LEVEL
    assert check_patch_level(lib, allow_unpatched=False) == PATCH_LEVEL


def test_the_engine_refuses_a_loaded_library_without_the_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As if llama_cpp had loaded a plain build: ensure_backend stops before initialising it."""
    monkeypatch.delenv("LLAMAY_ALLOW_UNPATCHED", raising=False)
    monkeypatch.setattr(llama_cpp.llama_cpp, "_lib", _stub(tmp_path, "int llama_backend_init(void) { return 0; }\n"))
    monkeypatch.setattr(native, "_ready", False)
    with pytest.raises(UnpatchedEngine, match=r"does not export llamay_patch_level\(\).*Run ./setup.sh"):
        native.ensure_backend()
    assert native._ready is False

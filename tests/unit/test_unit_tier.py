"""The unit tier needs no compiled engine: every module of it imports in a process where
`llama_cpp` cannot be imported. Modules that only need the engine's types import them under
TYPE_CHECKING, and the backend is imported where a model is loaded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

UNIT = Path(__file__).parent
ROOT = UNIT.parent.parent


def test_the_unit_tier_imports_without_llama_cpp() -> None:
    modules = sorted(f"tests.unit.{p.stem}" for p in UNIT.glob("*.py") if p.stem != "__init__")
    code = (
        "import importlib, sys\n"
        "sys.modules['llama_cpp'] = None  # as on a machine that has not built it\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "assert 'llamay.backend.native' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]

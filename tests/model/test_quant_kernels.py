"""The quantised matrix kernels compute the products they stand for. The invariance tests
(test_quant_invariance.py) check that every kernel gives a column what the others give it;
this checks what that is. A quantised model's logits are compared with those of the same
model written back as F32 by llama.cpp's own dequantiser, so both multiply by exactly the
same weight values: they differ only by the rounding of the activations to 8 bits on the
quantised side, a correlation above 0.9999 here. (Against the F32 model the weights were
quantised from, the same logits correlate at about 0.86: a kernel that multiplied by anything
else than the stored weights, or mixed up rows or lanes, would be far outside the bound.)
Read at once (the many-column kernels) and token by token (the one-column kernels).
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from llamay.backend.model import Model
from llamay.testing import quantize_gguf

from .invariance import PROMPT, read


def _correlations(a: list[np.ndarray], b: list[np.ndarray]) -> list[float]:
    assert len(a) == len(b) == len(PROMPT)
    return [float(np.corrcoef(x, y)[0, 1]) for x, y in zip(a, b, strict=True)]


@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1", "Q8_0", "Q4_K_M", "Q6_K"])
def test_a_quantised_model_computes_with_its_stored_weights(
    kind: str, quant_source_path: Path, tmp_path: Path
) -> None:
    quantised = quantize_gguf(quant_source_path, tmp_path / f"tiny-{kind}.gguf", kind)
    back = quantize_gguf(quantised, tmp_path / f"tiny-{kind}-f32.gguf", "F32", requantize=True)
    assert {t.tensor_type.name for t in gguf.GGUFReader(back).tensors} == {"F32"}
    mq, mf = Model(quantised), Model(back)
    try:
        exact = read(mf, PROMPT, len(PROMPT))
        for step in (len(PROMPT), 1):
            got = read(mq, PROMPT, step)
            assert min(_correlations(got, exact)) > 0.9999, f"{kind}, {step} token(s) a step"
    finally:
        mq.close()
        mf.close()

"""Which GGUF tensor each Hugging Face BERT weight becomes, and in which storage type.

GGUF names come from the `gguf` package's own tables (`gguf.TENSOR_NAMES`), the ones llama.cpp
loads for `LLM_ARCH_BERT`.  The classification head of a cross-encoder maps onto llama.cpp's rank
pooling head, which computes ``cls_out @ tanh(cls @ h[CLS] + cls_b) + cls_out_b``; that is exactly
BertForSequenceClassification's ``classifier(tanh(pooler.dense(h[CLS])))``, so

* ``bert.pooler.dense`` -> ``cls`` (llama.cpp's own converter drops the pooler and writes only
  ``cls.output``; the score is then off by up to a few logits), and
* ``classifier`` -> ``cls.output``.
"""

from __future__ import annotations

import re
from typing import Literal

import gguf
import numpy as np

__all__ = ["Dtype", "expected_shapes", "gguf_name", "storage"]

Dtype = Literal["f16", "f32", "q8_0"]

_T = gguf.MODEL_TENSOR

#: Top-level HF module -> GGUF tensor.  The pooler and classifier only count for a classifier.
_TOP = {
    "embeddings.word_embeddings": _T.TOKEN_EMBD,
    "embeddings.token_type_embeddings": _T.TOKEN_TYPES,
    "embeddings.position_embeddings": _T.POS_EMBD,
    "embeddings.LayerNorm": _T.TOKEN_EMBD_NORM,
}
_HEAD = {"pooler.dense": _T.CLS, "classifier": _T.CLS_OUT}

#: Per-layer HF module (under ``encoder.layer.N.``) -> GGUF tensor.
_LAYER = {
    "attention.self.query": _T.ATTN_Q,
    "attention.self.key": _T.ATTN_K,
    "attention.self.value": _T.ATTN_V,
    "attention.output.dense": _T.ATTN_OUT,
    "attention.output.LayerNorm": _T.ATTN_OUT_NORM,
    "intermediate.dense": _T.FFN_UP,
    "output.dense": _T.FFN_DOWN,
    "output.LayerNorm": _T.LAYER_OUT_NORM,
}

#: Weights that no BERT encoder graph uses: position id buffer, masked-LM and NSP heads.
_SKIPPED = re.compile(r"^(embeddings\.position_ids|cls\.predictions\..*|cls\.seq_relationship\..*)$")
_LAYER_RE = re.compile(r"^encoder\.layer\.(\d+)\.(.+)$")

#: Tensors llama.cpp's converter always keeps in F32 (tiny, and indexed rather than multiplied).
_ALWAYS_F32 = {_T.TOKEN_TYPES, _T.POS_EMBD}
#: The rank head stays F32: it is small (n_embd^2 + n_embd) and the score is a single number that
#: every rounding error lands on.
_HEAD_F32 = {_T.CLS, _T.CLS_OUT}


def _split_param(name: str) -> tuple[str, str]:
    """("module", "weight"|"bias") for a parameter name, with old TF-style gamma/beta renamed."""
    module, _, param = name.rpartition(".")
    param = {"gamma": "weight", "beta": "bias"}.get(param, param)
    if param not in ("weight", "bias"):
        raise ValueError(f"unsupported BERT weight {name!r} (not a weight or bias)")
    return module, param


def gguf_name(hf_name: str, *, head: bool) -> str | None:
    """The GGUF tensor name for the HF weight `hf_name`, or None for a weight that is not
    converted (masked-LM/NSP heads, and the pooler of an embedding model, which no embedding
    pooling uses).  `head` says whether the classification head is being converted.

    ValueError for a weight this converter does not know: an unknown tensor means a BERT variant
    the llama.cpp BERT graph would run wrongly, so it is refused instead of dropped."""
    name = hf_name.removeprefix("bert.")
    if _SKIPPED.match(name):
        return None
    module, param = _split_param(name)
    if module in _HEAD:
        return f"{gguf.TENSOR_NAMES[_HEAD[module]]}.{param}" if head else None
    if module in _TOP:
        return f"{gguf.TENSOR_NAMES[_TOP[module]]}.{param}"
    if m := _LAYER_RE.match(module):
        layer, sub = int(m.group(1)), m.group(2)
        if sub in _LAYER:
            return f"{gguf.TENSOR_NAMES[_LAYER[sub]].format(bid=layer)}.{param}"
    raise ValueError(f"unsupported BERT weight {hf_name!r} (not part of the standard BERT encoder)")


def expected_shapes(
    *, n_vocab: int, n_ctx: int, n_types: int, n_embd: int, n_ff: int, n_layer: int, head: bool
) -> dict[str, tuple[int, ...]]:
    """Every GGUF tensor a complete conversion writes, with its shape in HF (rows, cols) order."""
    name = gguf.TENSOR_NAMES
    matrix = {_T.ATTN_Q: (n_embd, n_embd), _T.ATTN_K: (n_embd, n_embd), _T.ATTN_V: (n_embd, n_embd)}
    matrix |= {_T.ATTN_OUT: (n_embd, n_embd), _T.FFN_UP: (n_ff, n_embd), _T.FFN_DOWN: (n_embd, n_ff)}
    shapes: dict[str, tuple[int, ...]] = {
        f"{name[_T.TOKEN_EMBD]}.weight": (n_vocab, n_embd),
        f"{name[_T.POS_EMBD]}.weight": (n_ctx, n_embd),
        f"{name[_T.TOKEN_TYPES]}.weight": (n_types, n_embd),
        f"{name[_T.TOKEN_EMBD_NORM]}.weight": (n_embd,),
        f"{name[_T.TOKEN_EMBD_NORM]}.bias": (n_embd,),
    }
    for i in range(n_layer):
        for t in _LAYER.values():
            base = name[t].format(bid=i)
            out_dim, *in_dim = matrix.get(t, (n_embd,))
            shapes[f"{base}.weight"] = (out_dim, *in_dim)
            shapes[f"{base}.bias"] = (out_dim,)
    if head:
        shapes |= {f"{name[_T.CLS]}.weight": (n_embd, n_embd), f"{name[_T.CLS]}.bias": (n_embd,)}
        shapes |= {f"{name[_T.CLS_OUT]}.weight": (1, n_embd), f"{name[_T.CLS_OUT]}.bias": (1,)}
    return shapes


def storage(
    gguf_tensor: str, array: np.ndarray, dtype: Dtype
) -> tuple[np.ndarray, gguf.GGMLQuantizationType]:
    """`array` (float32) encoded for the file: (data, type).  Vectors (norms, biases), the
    position and token-type tables and the rank head stay F32; matrices follow `dtype`, with a
    Q8_0 matrix whose rows are not a multiple of 32 falling back to F16 (Q8_0 blocks are 32 wide)."""
    base = gguf_tensor.rsplit(".", 1)[0]
    keep_f32 = {gguf.TENSOR_NAMES[t] for t in _ALWAYS_F32 | _HEAD_F32}
    if array.ndim < 2 or dtype == "f32" or base in keep_f32:
        return array.astype(np.float32), gguf.GGMLQuantizationType.F32
    block = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.Q8_0][0]
    if dtype == "q8_0" and array.shape[-1] % block == 0:
        q8 = gguf.GGMLQuantizationType.Q8_0
        return gguf.quants.quantize(array.astype(np.float32), q8), q8
    return array.astype(np.float16), gguf.GGMLQuantizationType.F16

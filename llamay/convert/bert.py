"""Convert a BERT Hugging Face folder (safetensors + WordPiece tokenizer) to a llama.cpp GGUF file.

No torch: the weights are read with `safetensors` into numpy and written with the `gguf` package,
as llama.cpp's own ``convert_hf_to_gguf.py`` lays them out for the "bert" architecture.  Two kinds
of model come out:

* ``embedding``: BertModel (e.g. sentence-transformers/all-MiniLM-L6-v2).  The GGUF's pooling type
  is the sentence-transformers Pooling module's mode (MEAN, CLS or LAST); a folder without one
  gets MEAN, which is what sentence-transformers itself uses for a plain BERT.
* ``rerank``: BertForSequenceClassification with one label (a cross-encoder).  Pooling type RANK,
  with the pooler and the classifier written as llama.cpp's rank head (see `bert_tensors`), so
  `llama_get_embeddings_seq` returns the model's raw logit.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import gguf
import numpy as np

from llamay.convert.bert_tensors import Dtype, expected_shapes, gguf_name, storage
from llamay.convert.hf import iter_safetensors, read_config, read_pooling_mode
from llamay.convert.wordpiece import read_wordpiece

__all__ = ["ConvertResult", "Dtype", "convert_bert"]

Kind = Literal["embedding", "rerank"]
Pooling = Literal["mean", "cls", "last", "rank"]

_ARCHITECTURES: dict[str, Kind] = {
    "BertModel": "embedding",
    "BertForMaskedLM": "embedding",
    "BertForSequenceClassification": "rerank",
}
_POOLING_TYPES: dict[Pooling, gguf.PoolingType] = {
    "mean": gguf.PoolingType.MEAN,
    "cls": gguf.PoolingType.CLS,
    "last": gguf.PoolingType.LAST,
    "rank": gguf.PoolingType.RANK,
}
#: sentence-transformers pooling modes llama.cpp has a pooling type for.
_ST_POOLING: dict[str, Pooling] = {"mean": "mean", "cls": "cls", "lasttoken": "last"}
#: llama.cpp's BERT graph runs GELU (tanh form); HF's exact-erf "gelu" differs from it by <1e-3.
_GELU = {"gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast"}
_FILE_TYPES: dict[str, gguf.LlamaFileType] = {
    "f32": gguf.LlamaFileType.ALL_F32,
    "f16": gguf.LlamaFileType.MOSTLY_F16,
    "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
}


@dataclass(frozen=True)
class ConvertResult:
    """What `convert_bert` wrote: the GGUF `path`, its `arch` ("bert"), the `pooling` type stored
    in it, the number of parameters written, and whether it is an "embedding" or a "rerank" model."""

    path: Path
    arch: str
    pooling: Pooling
    n_params: int
    kind: Kind


def _kind_of(src: Path, config: dict[str, Any]) -> Kind:
    """Embedding or rerank, from the config; ValueError for anything but the BERT variants above."""
    model_type = config.get("model_type", "bert")
    architectures = config.get("architectures") or (["BertModel"] if model_type == "bert" else [])
    if model_type != "bert" or len(architectures) != 1 or architectures[0] not in _ARCHITECTURES:
        raise ValueError(
            f"{src}: unsupported architecture {architectures or model_type!r} (model_type {model_type!r}); "
            f"supported: {', '.join(_ARCHITECTURES)}"
        )
    return _ARCHITECTURES[architectures[0]]


@dataclass(frozen=True)
class _Hparams:
    n_embd: int
    n_layer: int
    n_head: int
    n_ff: int
    n_ctx: int
    n_types: int
    n_vocab: int
    eps: float


def _hparams(src: Path, config: dict[str, Any]) -> _Hparams:
    """The encoder's sizes, checked against what llama.cpp's BERT graph can run."""
    try:
        h = _Hparams(
            n_embd=int(config["hidden_size"]),
            n_layer=int(config["num_hidden_layers"]),
            n_head=int(config["num_attention_heads"]),
            n_ff=int(config["intermediate_size"]),
            n_ctx=int(config["max_position_embeddings"]),
            n_types=int(config.get("type_vocab_size", 2)),
            n_vocab=int(config["vocab_size"]),
            eps=float(config.get("layer_norm_eps", 1e-12)),
        )
    except KeyError as e:
        raise ValueError(f"{src / 'config.json'}: missing {e.args[0]!r}") from None
    except (TypeError, ValueError) as e:
        raise ValueError(f"{src / 'config.json'}: bad size ({e})") from None
    act = config.get("hidden_act", "gelu")
    if act not in _GELU:
        raise ValueError(f"{src}: hidden_act {act!r} is not supported (llama.cpp's BERT uses GELU)")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"{src}: only absolute position embeddings are supported")
    if h.n_embd % h.n_head:
        raise ValueError(f"{src}: hidden_size {h.n_embd} is not a multiple of num_attention_heads {h.n_head}")
    return h


def _pooling(src: Path, kind: Kind) -> Pooling:
    if kind == "rerank":
        return "rank"
    mode = read_pooling_mode(src)
    if mode is None:
        return "mean"
    if mode not in _ST_POOLING:
        raise ValueError(f"{src}: sentence-transformers pooling mode {mode!r} has no llama.cpp pooling type")
    return _ST_POOLING[mode]


def _labels(src: Path, config: dict[str, Any]) -> list[str]:
    """The classifier's one label; ValueError for a multi-label classifier (not a reranker)."""
    id2label = config.get("id2label") or {"0": "LABEL_0"}
    if len(id2label) != 1:
        raise ValueError(
            f"{src}: a sequence classifier with {len(id2label)} labels is not a reranker "
            "(a cross-encoder has exactly one output)"
        )
    return [str(v) for _, v in sorted(id2label.items(), key=lambda kv: int(kv[0]))]


def _check_shapes(src: Path, arrays: dict[str, np.ndarray], h: _Hparams, head: bool) -> None:
    """The weights hold every tensor the GGUF metadata promises, in the shape llama.cpp checks."""
    expected = expected_shapes(
        n_vocab=h.n_vocab,
        n_ctx=h.n_ctx,
        n_types=h.n_types,
        n_embd=h.n_embd,
        n_ff=h.n_ff,
        n_layer=h.n_layer,
        head=head,
    )
    missing = sorted(expected.keys() - arrays.keys())
    if missing:
        raise ValueError(f"{src}: incomplete BERT weights, missing {', '.join(missing[:5])}")
    for name, shape in expected.items():
        if arrays[name].shape != shape:
            raise ValueError(f"{src}: tensor {name} has shape {arrays[name].shape}, config implies {shape}")


def convert_bert(
    src_dir: Path, out_path: Path, *, dtype: Dtype = "f16", name: str | None = None
) -> ConvertResult:
    """Convert the BERT Hugging Face folder `src_dir` to the GGUF file `out_path`.

    `src_dir` holds ``config.json``, ``model.safetensors`` (or sharded safetensors with an index),
    and ``tokenizer.json`` or ``vocab.txt``; a sentence-transformers folder also has
    ``modules.json`` and its Pooling config.  `dtype` is the storage of the weight matrices
    ("f16", "q8_0" or "f32"; vectors stay F32).  `name` is the model name stored in the file
    (default: the folder name).

    The file is written under a temporary name and renamed into place, so `out_path` is either
    the complete GGUF or untouched.  Raises ValueError for a folder that is not a supported BERT
    model (missing files, another architecture, a multi-label classifier, unknown weights)."""
    src = Path(src_dir)
    out = Path(out_path)
    if dtype not in _FILE_TYPES:
        raise ValueError(f"dtype must be one of {', '.join(_FILE_TYPES)}, not {dtype!r}")
    config = read_config(src)
    kind = _kind_of(src, config)
    head = kind == "rerank"
    h = _hparams(src, config)
    pooling = _pooling(src, kind)
    labels = _labels(src, config) if head else []

    arrays: dict[str, np.ndarray] = {}
    for hf_name, array in iter_safetensors(src):
        target = gguf_name(hf_name, head=head)
        if target is not None:
            arrays[target] = array
    _check_shapes(src, arrays, h, head)
    vocab = read_wordpiece(src, h.n_vocab)

    out.parent.mkdir(parents=True, exist_ok=True)
    # A hidden name beside the target, so the final rename is atomic (same filesystem).
    tmp = out.with_name(f".{out.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.partial")
    try:
        writer = gguf.GGUFWriter(tmp, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.BERT])
        writer.add_name(name if name is not None else src.resolve().name)
        writer.add_file_type(_FILE_TYPES[dtype])
        if dtype == "q8_0":
            writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
        writer.add_context_length(h.n_ctx)
        writer.add_embedding_length(h.n_embd)
        writer.add_feed_forward_length(h.n_ff)
        writer.add_block_count(h.n_layer)
        writer.add_head_count(h.n_head)
        writer.add_layer_norm_eps(h.eps)
        writer.add_causal_attention(False)
        writer.add_pooling_type(_POOLING_TYPES[pooling])
        if head:
            # llama.cpp sizes the rank output (n_cls_out) from this list.
            writer.add_classifier_output_labels(labels)
        vocab.write(writer, h.n_types)
        for tensor_name in sorted(arrays, key=_tensor_order):
            data, qtype = storage(tensor_name, arrays[tensor_name], dtype)
            writer.add_tensor(tensor_name, data, raw_dtype=qtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    n_params = sum(int(a.size) for a in arrays.values())
    return ConvertResult(path=out, arch="bert", pooling=pooling, n_params=n_params, kind=kind)


def _tensor_order(name: str) -> tuple[int, int, str]:
    """Embeddings first, then blocks in layer order, then the head: the order readers expect."""
    if name.startswith("blk."):
        return (1, int(name.split(".")[1]), name)
    return (2 if name.startswith("cls") else 0, 0, name)

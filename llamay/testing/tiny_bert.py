"""Tiny, deterministic BERT Hugging Face folders for testing the BERT-to-GGUF converter.

`write_tiny_bert` writes what `transformers` / `sentence-transformers` would save, at toy size
(hidden 32, 2 layers, a ~150-token WordPiece vocabulary), with seeded random weights:

* ``config.json``, ``model.safetensors`` (float32), ``vocab.txt``, ``tokenizer.json``,
  ``tokenizer_config.json``, ``special_tokens_map.json``;
* the embedding variant (BertModel) adds the sentence-transformers files: ``modules.json``,
  ``sentence_bert_config.json`` and ``1_Pooling/config.json`` (mean or CLS pooling);
* the classifier variant (BertForSequenceClassification, one label, a cross-encoder) stores its
  weights under ``bert.`` with the pooler (``bert.pooler.dense``) and ``classifier``, as HF does.

The weights are scaled so every part matters to the output: attention mixes tokens, the pooler's
tanh is not saturated and the classifier score varies by several units between inputs, so a
converter that drops or misplaces a tensor is caught by comparing outputs.
"""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Any, Literal

import numpy as np
from safetensors.numpy import save_file

__all__ = ["SPECIAL_TOKENS", "TINY_WORDS", "tiny_bert_vocab", "write_tiny_bert"]

#: BERT's special tokens; in the tiny vocabulary they are ids 0-4 in this order.
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

#: Whole words in the tiny vocabulary (anything else is spelled out letter by letter).  One-letter
#: words ("a", "i") are already there as characters.
_WORDS = (
    "the an and or of to in on for with from is are was be it this that how what where when why "
    "do does you we they fork context contexts copy write page pages route best city road map "
    "model models server text query document search rank score cat dog fox quick brown lazy over "
    "hello world good day night"
)
TINY_WORDS = tuple(_WORDS.split())


def tiny_bert_vocab() -> list[str]:
    """The tiny WordPiece vocabulary, in id order (no duplicates): specials, single characters
    (word-initial and "##" continuation), whole words, then a few suffixes."""
    chars = string.ascii_lowercase + string.digits + string.punctuation
    return [
        *SPECIAL_TOKENS,
        *chars,
        *(f"##{c}" for c in string.ascii_lowercase + string.digits),
        *TINY_WORDS,
        "##ing",
        "##ed",
    ]


def _tokenizer_json(vocab: list[str], max_len: int) -> dict[str, Any]:
    """A `tokenizers` tokenizer.json for an uncased BERT WordPiece tokenizer over `vocab`."""
    ids = {t: i for i, t in enumerate(vocab)}
    added = [
        {
            "id": ids[t],
            "content": t,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for t in SPECIAL_TOKENS
    ]
    cls, sep = ({"SpecialToken": {"id": t, "type_id": 0}} for t in ("[CLS]", "[SEP]"))
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {
            "type": "BertNormalizer",
            "clean_text": True,
            "handle_chinese_chars": True,
            "strip_accents": None,
            "lowercase": True,
        },
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [cls, {"Sequence": {"id": "A", "type_id": 0}}, sep],
            "pair": [
                cls,
                {"Sequence": {"id": "A", "type_id": 0}},
                sep,
                {"Sequence": {"id": "B", "type_id": 1}},
                {"SpecialToken": {"id": "[SEP]", "type_id": 1}},
            ],
            "special_tokens": {t: {"id": t, "ids": [ids[t]], "tokens": [t]} for t in ("[CLS]", "[SEP]")},
        },
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {
            "type": "WordPiece",
            "unk_token": "[UNK]",
            "continuing_subword_prefix": "##",
            "max_input_chars_per_word": max_len,
            "vocab": ids,
        },
    }


def _weights(cfg: dict[str, int], rng: np.random.Generator, classifier: bool) -> dict[str, np.ndarray]:
    """Random BERT weights in HF names (prefixed ``bert.`` for the classifier, as HF saves it)."""
    h, ff = cfg["hidden_size"], cfg["intermediate_size"]

    def matrix(n_out: int, n_in: int, gain: float = 1.0) -> np.ndarray:
        # 1/sqrt(fan_in) keeps activations near unit scale, so nothing saturates or vanishes.
        return rng.normal(0.0, gain / np.sqrt(n_in), (n_out, n_in)).astype(np.float32)

    def vector(n: int, mean: float = 0.0, std: float = 0.1) -> np.ndarray:
        return rng.normal(mean, std, n).astype(np.float32)

    w: dict[str, np.ndarray] = {
        "embeddings.word_embeddings.weight": rng.normal(0, 1, (cfg["vocab_size"], h)).astype(np.float32),
        "embeddings.position_embeddings.weight": rng.normal(
            0, 0.5, (cfg["max_position_embeddings"], h)
        ).astype(np.float32),
        "embeddings.token_type_embeddings.weight": rng.normal(0, 0.5, (cfg["type_vocab_size"], h)).astype(
            np.float32
        ),
        "embeddings.LayerNorm.weight": vector(h, 1.0),
        "embeddings.LayerNorm.bias": vector(h),
    }
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        # Larger query/key weights give peaked, input-dependent attention instead of near-uniform.
        for part, gain in (
            ("attention.self.query", 2.0),
            ("attention.self.key", 2.0),
            ("attention.self.value", 1.0),
        ):
            w[p + part + ".weight"], w[p + part + ".bias"] = matrix(h, h, gain), vector(h)
        w[p + "attention.output.dense.weight"], w[p + "attention.output.dense.bias"] = matrix(h, h), vector(h)
        w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"] = (
            vector(h, 1.0),
            vector(h),
        )
        w[p + "intermediate.dense.weight"], w[p + "intermediate.dense.bias"] = matrix(ff, h), vector(ff)
        w[p + "output.dense.weight"], w[p + "output.dense.bias"] = matrix(h, ff), vector(h)
        w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"] = vector(h, 1.0), vector(h)
    # HF's BertModel saves its pooler too; embedding conversion must ignore it.
    w["pooler.dense.weight"], w["pooler.dense.bias"] = matrix(h, h), vector(h)
    if not classifier:
        return w
    w = {f"bert.{k}": v for k, v in w.items()}
    w["classifier.weight"], w["classifier.bias"] = matrix(1, h, 3.0), vector(1, 0.5)
    return w


def write_tiny_bert(
    folder: Path,
    *,
    classifier: bool = False,
    pooling: Literal["mean", "cls"] = "mean",
    tokenizer_json: bool = True,
    seed: int = 0,
) -> Path:
    """Write a tiny random BERT Hugging Face folder at `folder` (created) and return it.

    `classifier` writes a one-label BertForSequenceClassification (cross-encoder) instead of a
    sentence-transformers BertModel with `pooling` mean or CLS.  `tokenizer_json=False` leaves
    out ``tokenizer.json``, for the vocab.txt-only folders older models ship.  Same arguments,
    same bytes."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    vocab = tiny_bert_vocab()
    sizes = {
        "vocab_size": len(vocab),
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
        "type_vocab_size": 2,
    }
    config: dict[str, Any] = {
        "architectures": ["BertForSequenceClassification" if classifier else "BertModel"],
        "model_type": "bert",
        **sizes,
        "hidden_act": "gelu",
        "layer_norm_eps": 1e-12,
        "position_embedding_type": "absolute",
        "pad_token_id": 0,
    }
    if classifier:
        config["id2label"], config["label2id"] = {"0": "LABEL_0"}, {"LABEL_0": 0}

    def dump(name: str, data: Any) -> None:
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")

    dump("config.json", config)
    save_file(_weights(sizes, rng, classifier), str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "vocab.txt").write_text("".join(t + "\n" for t in vocab), encoding="utf-8")
    if tokenizer_json:
        dump("tokenizer.json", _tokenizer_json(vocab, 100))
    specials = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]"}
    specials["mask_token"] = "[MASK]"
    dump("special_tokens_map.json", specials)
    dump(
        "tokenizer_config.json",
        {**specials, "do_lower_case": True, "tokenizer_class": "BertTokenizer", "model_max_length": 64},
    )
    if not classifier:
        dump(
            "modules.json",
            [
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            ],
        )
        dump("sentence_bert_config.json", {"max_seq_length": 64, "do_lower_case": False})
        dump(
            "1_Pooling/config.json",
            {
                "word_embedding_dimension": sizes["hidden_size"],
                "pooling_mode_cls_token": pooling == "cls",
                "pooling_mode_mean_tokens": pooling == "mean",
                "pooling_mode_max_tokens": False,
                "pooling_mode_mean_sqrt_len_tokens": False,
            },
        )
    return folder

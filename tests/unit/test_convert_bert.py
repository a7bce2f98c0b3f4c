"""The BERT-to-GGUF converter on tiny generated Hugging Face folders, read back with GGUFReader."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from llamay.convert import ConvertResult, convert_bert
from llamay.testing.tiny_bert import tiny_bert_vocab, write_tiny_bert

Q = gguf.GGMLQuantizationType
LAYER_TENSORS = [
    f"{module}.{param}"
    for module in (
        "attn_q",
        "attn_k",
        "attn_v",
        "attn_output",
        "attn_output_norm",
        "ffn_up",
        "ffn_down",
        "layer_output_norm",
    )
    for param in ("weight", "bias")
]
BASE_TENSORS = {"token_embd.weight", "token_types.weight", "position_embd.weight"}
BASE_TENSORS |= {"token_embd_norm.weight", "token_embd_norm.bias"}
BASE_TENSORS |= {f"blk.{i}.{t}" for i in range(2) for t in LAYER_TENSORS}
HEAD_TENSORS = {"cls.weight", "cls.bias", "cls.output.weight", "cls.output.bias"}


@pytest.fixture(scope="module")
def embedder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="module")
def classifier_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_bert(tmp_path_factory.mktemp("tiny-bert-cls"), classifier=True)


def field(reader: gguf.GGUFReader, key: str) -> Any:
    f = reader.get_field(key)
    assert f is not None, f"missing {key}"
    return f.contents()


def tensors(reader: gguf.GGUFReader) -> dict[str, gguf.ReaderTensor]:
    return {t.name: t for t in reader.tensors}


def as_f32(t: gguf.ReaderTensor) -> np.ndarray:
    """A tensor's values as float32 in HF (rows, cols) order, dequantizing Q8_0."""
    return gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(tuple(reversed(t.shape)))


def test_embedding_model_layout(embedder_dir: Path, tmp_path: Path) -> None:
    result = convert_bert(embedder_dir, tmp_path / "e.gguf")
    assert result == ConvertResult(tmp_path / "e.gguf", "bert", "mean", result.n_params, "embedding")
    r = gguf.GGUFReader(result.path)
    assert field(r, "general.architecture") == "bert"
    assert field(r, "general.name") == embedder_dir.name
    assert field(r, "general.file_type") == gguf.LlamaFileType.MOSTLY_F16
    assert field(r, "bert.context_length") == 64
    assert field(r, "bert.embedding_length") == 32
    assert field(r, "bert.feed_forward_length") == 64
    assert field(r, "bert.block_count") == 2
    assert field(r, "bert.attention.head_count") == 4
    assert field(r, "bert.attention.layer_norm_epsilon") == pytest.approx(1e-12)
    assert field(r, "bert.attention.causal") is False
    assert field(r, "bert.pooling_type") == gguf.PoolingType.MEAN
    assert r.get_field("bert.classifier.output_labels") is None

    ts = tensors(r)
    # The HF pooler is in the folder but no embedding pooling uses it, so it is not converted.
    assert set(ts) == BASE_TENSORS
    n_vocab = len(tiny_bert_vocab())
    assert list(ts["token_embd.weight"].shape) == [32, n_vocab]
    assert list(ts["position_embd.weight"].shape) == [32, 64]
    assert list(ts["token_types.weight"].shape) == [32, 2]
    assert list(ts["blk.1.ffn_up.weight"].shape) == [32, 64]
    assert list(ts["blk.1.ffn_down.weight"].shape) == [64, 32]
    assert ts["token_embd.weight"].tensor_type == Q.F16
    assert ts["blk.0.attn_q.weight"].tensor_type == Q.F16
    for name in ("token_types.weight", "position_embd.weight", "blk.0.attn_q.bias", "token_embd_norm.weight"):
        assert ts[name].tensor_type == Q.F32, name
    assert result.n_params == sum(int(t.n_elements) for t in ts.values())


def test_tokenizer_fields(embedder_dir: Path, tmp_path: Path) -> None:
    r = gguf.GGUFReader(convert_bert(embedder_dir, tmp_path / "e.gguf").path)
    vocab = tiny_bert_vocab()
    tokens = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type")
    assert field(r, "tokenizer.ggml.model") == "bert"
    assert field(r, "tokenizer.ggml.token_type_count") == 2
    assert len(tokens) == len(types) == len(vocab) == len(set(vocab))
    # Phantom-space form: word starts get U+2581, "##" continuations lose their prefix.
    assert tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert types[:5] == [gguf.TokenType.CONTROL] * 5
    assert tokens[vocab.index("hello")] == "\u2581hello"
    assert tokens[vocab.index("##ing")] == "ing"
    assert types[vocab.index("hello")] == gguf.TokenType.NORMAL
    roles = ("bos", "eos", "unknown", "seperator", "padding", "mask")  # GGUF's own spelling
    specials = {role: field(r, f"tokenizer.ggml.{role}_token_id") for role in roles}
    assert specials == {"bos": 2, "eos": 3, "unknown": 1, "seperator": 3, "padding": 0, "mask": 4}
    assert field(r, "tokenizer.ggml.add_bos_token") is True
    assert field(r, "tokenizer.ggml.add_eos_token") is True
    # BERT's pair template is [CLS] A [SEP] B [SEP]: the separator is the EOS, not an extra token.
    assert field(r, "tokenizer.ggml.add_sep_token") is False


def test_vocab_txt_only_folder_gives_the_same_tokenizer(tmp_path: Path) -> None:
    full = gguf.GGUFReader(convert_bert(write_tiny_bert(tmp_path / "a"), tmp_path / "a.gguf").path)
    bare = gguf.GGUFReader(
        convert_bert(write_tiny_bert(tmp_path / "b", tokenizer_json=False), tmp_path / "b.gguf").path
    )
    for key in (
        "tokens",
        "token_type",
        "bos_token_id",
        "eos_token_id",
        "seperator_token_id",
        "padding_token_id",
    ):
        assert field(full, f"tokenizer.ggml.{key}") == field(bare, f"tokenizer.ggml.{key}"), key


def test_cls_pooling(tmp_path: Path) -> None:
    result = convert_bert(write_tiny_bert(tmp_path / "m", pooling="cls"), tmp_path / "c.gguf")
    assert result.pooling == "cls"
    assert field(gguf.GGUFReader(result.path), "bert.pooling_type") == gguf.PoolingType.CLS


def test_classifier_head_includes_the_pooler(classifier_dir: Path, tmp_path: Path) -> None:
    result = convert_bert(classifier_dir, tmp_path / "r.gguf", name="tiny-reranker")
    assert (result.kind, result.pooling) == ("rerank", "rank")
    r = gguf.GGUFReader(result.path)
    assert field(r, "general.name") == "tiny-reranker"
    assert field(r, "bert.pooling_type") == gguf.PoolingType.RANK
    assert field(r, "bert.classifier.output_labels") == ["LABEL_0"]
    ts = tensors(r)
    assert set(ts) == BASE_TENSORS | HEAD_TENSORS
    assert list(ts["cls.weight"].shape) == [32, 32]
    assert list(ts["cls.output.weight"].shape) == [32, 1]
    hf = load_file(str(classifier_dir / "model.safetensors"))
    # pooler.dense -> cls and classifier -> cls.output, kept in F32 bit for bit.
    for gguf_name, hf_name in (
        ("cls.weight", "bert.pooler.dense.weight"),
        ("cls.bias", "bert.pooler.dense.bias"),
        ("cls.output.weight", "classifier.weight"),
        ("cls.output.bias", "classifier.bias"),
    ):
        assert ts[gguf_name].tensor_type == Q.F32
        np.testing.assert_array_equal(as_f32(ts[gguf_name]), hf[hf_name])
    np.testing.assert_array_equal(
        as_f32(ts["blk.1.attn_v.weight"]),
        hf["bert.encoder.layer.1.attention.self.value.weight"].astype(np.float16),
    )


def test_f32_and_q8_0(embedder_dir: Path, tmp_path: Path) -> None:
    hf = load_file(str(embedder_dir / "model.safetensors"))
    f32 = gguf.GGUFReader(convert_bert(embedder_dir, tmp_path / "f32.gguf", dtype="f32").path)
    assert field(f32, "general.file_type") == gguf.LlamaFileType.ALL_F32
    assert {t.tensor_type for t in f32.tensors} == {Q.F32}
    np.testing.assert_array_equal(
        as_f32(tensors(f32)["token_embd.weight"]), hf["embeddings.word_embeddings.weight"]
    )

    q8 = gguf.GGUFReader(convert_bert(embedder_dir, tmp_path / "q8.gguf", dtype="q8_0").path)
    assert field(q8, "general.file_type") == gguf.LlamaFileType.MOSTLY_Q8_0
    assert field(q8, "general.quantization_version") == gguf.GGML_QUANT_VERSION
    ts = tensors(q8)
    assert ts["blk.0.ffn_down.weight"].tensor_type == Q.Q8_0
    assert ts["position_embd.weight"].tensor_type == Q.F32
    w = hf["encoder.layer.0.intermediate.dense.weight"]
    np.testing.assert_allclose(as_f32(ts["blk.0.ffn_up.weight"]), w, atol=np.abs(w).max() / 100)


def test_sharded_and_bf16_weights(embedder_dir: Path, tmp_path: Path) -> None:
    src = write_tiny_bert(tmp_path / "m")
    hf = load_file(str(src / "model.safetensors"))
    (src / "model.safetensors").unlink()
    names = sorted(hf)
    half = len(names) // 2
    save_file({k: hf[k] for k in names[:half]}, str(src / "model-00001-of-00002.safetensors"))
    write_bf16_safetensors({k: hf[k] for k in names[half:]}, src / "model-00002-of-00002.safetensors")
    shard = {k: f"model-0000{1 + (i >= half)}-of-00002.safetensors" for i, k in enumerate(names)}
    (src / "model.safetensors.index.json").write_text(json.dumps({"weight_map": shard}))
    ts = tensors(gguf.GGUFReader(convert_bert(src, tmp_path / "s.gguf", dtype="f32").path))
    assert set(ts) == BASE_TENSORS
    bf16_name = "encoder.layer.1.output.dense.weight"
    assert bf16_name in names[half:]
    got = as_f32(ts["blk.1.ffn_down.weight"])
    np.testing.assert_array_equal(got, bf16_round(hf[bf16_name]))


def write_bf16_safetensors(arrays: dict[str, np.ndarray], path: Path) -> None:
    """safetensors' numpy API cannot write bfloat16, so lay the file out by hand."""
    header: dict[str, Any] = {}
    blobs = []
    offset = 0
    for name, a in arrays.items():
        raw = (bf16_round(a).view(np.uint32) >> 16).astype("<u2").tobytes()
        header[name] = {"dtype": "BF16", "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    encoded = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + b"".join(blobs))


def bf16_round(a: np.ndarray) -> np.ndarray:
    """float32 values truncated to bfloat16 precision (what the hand-written file stores)."""
    return (a.astype(np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32)


def test_output_replaces_an_existing_file(embedder_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "e.gguf"
    out.write_bytes(b"old")
    convert_bert(embedder_dir, out)
    assert field(gguf.GGUFReader(out), "general.architecture") == "bert"
    assert [p.name for p in tmp_path.iterdir()] == ["e.gguf"]


def edit_json(path: Path, **changes: Any) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def edit_config(src: Path, **changes: Any) -> None:
    edit_json(src / "config.json", **changes)


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        (lambda d: (d / "config.json").unlink(), "missing config.json"),
        (lambda d: (d / "model.safetensors").unlink(), "missing model.safetensors"),
        (
            lambda d: [(d / f).unlink() for f in ("tokenizer.json", "vocab.txt")],
            "missing tokenizer.json and vocab.txt",
        ),
        (
            lambda d: (d / "model.safetensors").write_bytes(b"not a safetensors file"),
            "not a readable safetensors",
        ),
        (
            lambda d: edit_config(d, architectures=["RobertaModel"], model_type="roberta"),
            "unsupported architecture",
        ),
        (lambda d: edit_config(d, architectures=["BertForTokenClassification"]), "unsupported architecture"),
        (lambda d: edit_config(d, hidden_act="relu"), "hidden_act"),
        (lambda d: edit_json(d / "tokenizer_config.json", do_lower_case=False), "cased WordPiece"),
        (
            lambda d: edit_json(
                d / "tokenizer.json", normalizer={"type": "BertNormalizer", "lowercase": False}
            ),
            "cased WordPiece",
        ),
        (lambda d: edit_config(d, num_hidden_layers=3), "missing blk.2"),
        (lambda d: edit_config(d, max_position_embeddings=128), "position_embd.weight has shape"),
        (
            lambda d: (d / "1_Pooling" / "config.json").write_text('{"pooling_mode_max_tokens": true}'),
            "pooling mode 'max'",
        ),
        (
            lambda d: save_file(
                {
                    **load_file(str(d / "model.safetensors")),
                    "encoder.layer.0.attention.self.rel_bias.weight": np.zeros(4),
                },
                str(d / "model.safetensors"),
            ),
            "unsupported BERT weight",
        ),
    ],
)
def test_bad_folders_raise_value_error(tmp_path: Path, breakage: Any, message: str) -> None:
    src = write_tiny_bert(tmp_path / "m")
    breakage(src)
    with pytest.raises(ValueError, match=message):
        convert_bert(src, tmp_path / "out" / "x.gguf")
    assert not (tmp_path / "out" / "x.gguf").exists()


def test_multi_label_classifier_is_refused(tmp_path: Path) -> None:
    src = write_tiny_bert(tmp_path / "m", classifier=True)
    edit_config(src, id2label={"0": "NEG", "1": "POS"})
    with pytest.raises(ValueError, match="2 labels is not a reranker"):
        convert_bert(src, tmp_path / "x.gguf")


def test_not_a_folder_and_bad_dtype(embedder_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a directory"):
        convert_bert(tmp_path / "nowhere", tmp_path / "x.gguf")
    with pytest.raises(ValueError, match="dtype must be one of"):
        convert_bert(embedder_dir, tmp_path / "x.gguf", dtype="q4_0")  # type: ignore[arg-type]
